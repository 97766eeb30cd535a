"""The Versions tab: diff any two saved versions, roll back to one (confirmed first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from ...schema.constants import section_label
from .. import data, view_models
from ..data import MemoryReader
from .confirm import ask, confirmation
from .markup import clock, code, md, plain, table, time_column


def versions_page(home: Path, reader: MemoryReader) -> None:
    """Diff any two saved versions; roll back to one after a confirmation."""
    listed = data.versions(reader)
    if not listed:
        st.info(
            "No saved versions yet: every change to memory saves one.", icon=":material/history:"
        )
        return
    by_id = {v["id"]: v for v in listed}

    def label(v: int) -> str:
        row = by_id[v]
        saved = clock(row["created_at"]) or row["created_at"]
        return plain(f"v{v} · {row['reason']} · {saved} · {row['fact_count']} facts")

    ids = list(by_id)
    c1, c2 = st.columns(2)
    old = c1.selectbox("From", ids, index=min(1, len(ids) - 1), key="ver_from", format_func=label)
    new = c2.selectbox("To", ids, index=0, key="ver_to", format_func=label)
    diff = view_models.diff_snapshots(reader.version(old), reader.version(new))
    if old == new:
        st.info(
            f"Pick two different versions to compare (v{old} is the only one so far)."
            if len(ids) == 1
            else "Pick two different versions to compare."
        )
    elif not any(diff.values()):
        st.info(f"v{old} and v{new} hold the same facts and summaries.")

    def fact(f: dict[str, Any]) -> str:
        return f"{code(f['id'])} {md(f['content'])} ({md(f['category'])}, {md(f['confidence'])})"

    lines = [f"- :material/add: added {fact(f)}" for f in diff["added"]]
    lines += [f"- :material/remove: removed {fact(f)}" for f in diff["removed"]]
    lines += [
        f"- :material/edit: {code(c['id'])} {c['field']}: {md(c['old'])} → {md(c['new'])}"
        for c in diff["changed"]
    ]
    lines += [
        f"- :material/notes: {md(section_label(s['section']))}: “{md(s['old'])}” → “{md(s['new'])}”"
        for s in diff["sections"]
    ]
    if lines:
        st.markdown(f"**v{old} → v{new}**\n\n" + "\n".join(lines))
    st.divider()
    target = st.selectbox("Roll back to", ids, index=0, key="ver_rollback", format_func=label)
    st.button(
        "Roll back…",
        key="ver_rollback_go",
        on_click=ask,
        args=(
            {
                "op": "rollback",
                "version": target,
                "question": f"Replace memory.json with version v{target} "
                f"({md(by_id[target]['fact_count'])} facts)? The current memory stays in "
                "the journal as its own version.",
            },
        ),
    )
    confirmation(home, ("rollback",))
    with st.expander(f"All versions ({len(listed)})"):
        table(
            view_models.frame(listed, ("created_at",)),
            column_config={
                "id": st.column_config.NumberColumn("version", width=70),
                "created_at": time_column("saved"),
                "reason": st.column_config.TextColumn("reason", width=100),
                "source": st.column_config.TextColumn("source", width=200),
                "fact_count": st.column_config.NumberColumn("facts", width=70),
            },
        )
