"""The Facts tab: filter, sort, edit and forget facts (writes confirmed first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from ...schema.constants import section_label
from .. import data, view_models
from .confirm import ask, confirmation
from .markup import code, md, md_lines, plain, project_picker, table, time_column, when


def facts_page(home: Path, memory: dict[str, Any] | None, reader: Any = None) -> None:
    """Filter, sort, edit and forget facts; who added and who last changed each (the
    journal's events, through the read-only ``reader``)."""
    if memory is None:
        if (home / data.MEMORY_FILENAME).exists():
            st.caption("Facts are unavailable while memory.json is damaged (see above).")
        else:
            st.info("No facts yet: memory.json has not been written.", icon=":material/eco:")
        return
    all_facts = memory.get("facts", [])
    c0, c1, c2, c3, c4 = st.columns([2, 2, 2, 3, 2])
    project = project_picker(
        c0,
        memory,
        "facts_project",
        "A project's facts come with the user's own (shared by every project).",
    )
    categories = c1.multiselect(
        "Category", list(data.CATEGORIES), key="facts_categories", placeholder="all"
    )
    low_high = c2.slider("Confidence", 0.0, 1.0, (0.0, 1.0), 0.05, key="facts_confidence")
    text = c3.text_input("Text contains", key="facts_text", placeholder="e.g. polars")
    sort = c4.selectbox("Sort", list(view_models.SORTS), key="facts_sort")
    changers = reader.changed_by() if reader is not None and reader.db is not None else {}
    rows = view_models.fact_rows(
        memory,
        categories=categories,
        confidence=low_high,
        text=text,
        sort=sort,
        project=project,
        changers=changers,
    )
    st.caption(
        f"{len(rows)} of {len(all_facts)} facts · "
        f"last updated {when(memory.get('lastUpdated'))} UTC"
    )
    if rows:
        table(
            view_models.frame(rows, ("createdAt", "updatedAt")),
            column_order=(
                "content",
                "project",
                "category",
                "by",
                "confidence",
                "updatedAt",
                "createdAt",
                "source",
                "id",
            ),
            column_config={
                # 1,110 px in all: the table fits a 1280 px window beside the sidebar
                "content": st.column_config.TextColumn("content", width=300),
                "project": st.column_config.TextColumn("project", width=85),
                "category": st.column_config.TextColumn("category", width=85),
                "by": st.column_config.TextColumn(
                    "by", width=100, help="who added it (→ who last changed it)"
                ),
                "confidence": st.column_config.ProgressColumn(
                    "confidence", min_value=0.0, max_value=1.0, format="%.2f", width=90
                ),
                "updatedAt": time_column("updatedAt", 125),
                "createdAt": time_column("createdAt", 125),
                "source": st.column_config.TextColumn("source", width=100),
                "id": st.column_config.TextColumn("id", width=100),
            },
        )
    else:
        st.info(
            "No fact matches these filters." if all_facts else "No facts yet.",
            icon=":material/search_off:",
        )
    sections = view_models.section_rows(memory, project)
    if sections:
        with st.expander(f"User, history and project summaries ({len(sections)})"):
            for s in sections:
                st.markdown(
                    f"**{md(section_label(s['section']))}** · _{when(s['updatedAt'])}_\n\n"
                    f"{md_lines(s['summary'])}"
                )
    if rows:
        _fact_editor(home, rows)


def _fact_editor(home: Path, rows: list[dict[str, Any]]) -> None:
    st.subheader("Edit or forget a fact")
    by_id = {r["id"]: r for r in rows}
    fid = st.selectbox(
        "Fact",
        list(by_id),
        key="facts_pick",
        format_func=lambda i: plain(f"{i} · {by_id[i]['content']}" if i in by_id else i, 100),
    )
    if fid is None or fid not in by_id:
        return
    fact = by_id[fid]
    content = st.text_area("Content", value=fact["content"], key=f"edit_content_{fid}")
    c1, c2 = st.columns(2)
    categories = list(data.CATEGORIES)
    if fact["category"] not in categories:
        categories.append(fact["category"])
    category = c1.selectbox(
        "Category",
        categories,
        index=categories.index(fact["category"]),
        key=f"edit_cat_{fid}",
        format_func=plain,
    )
    confidence = c2.slider(
        "Confidence", 0.0, 1.0, float(fact["confidence"]), 0.01, key=f"edit_conf_{fid}"
    )
    changes = {
        "content": content.strip() if content.strip() != fact["content"] else None,
        "category": category if category != fact["category"] else None,
        "confidence": confidence if abs(confidence - fact["confidence"]) > 1e-9 else None,
    }
    what = ", ".join(k for k, v in changes.items() if v is not None)
    b1, b2 = st.columns(2)
    b1.button(
        "Save changes…",
        key="facts_save",
        disabled=not what,
        on_click=ask,
        args=(
            {
                "op": "edit",
                "fact_id": fid,
                **changes,
                "question": f"Save the new {what} of fact {code(fid)}? The change is journaled "
                "and can be rolled back from the Versions tab.",
            },
        ),
    )
    b2.button(
        "Forget…",
        key="facts_forget",
        on_click=ask,
        args=(
            {
                "op": "forget",
                "fact_id": fid,
                "question": f"Forget fact {code(fid)} (\u201c{md(fact['content'])}\u201d)? "
                "It is removed from memory.json; the journal keeps a record and a version "
                "to roll back to.",
            },
        ),
    )
    confirmation(home, ("edit", "forget"))
