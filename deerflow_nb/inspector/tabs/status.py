"""The Status tab: the fold queue, the last fold's report and error, where files are."""

from __future__ import annotations

from typing import Any

import streamlit as st

from .. import data, view_models
from .markup import code, md, md_lines, table, time_column, when


def status_page(info: dict[str, Any], folds: dict[str, Any]) -> None:
    """The fold queue, what the last fold did (and why items were left out), the last
    error, recent folds and where every file is."""
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.metric("Pending folds", info["pending"])
    c2.metric("Folding now", info["folding_now"])
    c3.metric("Failed folds", info["failed"])
    c4.metric("Awaiting review", info["awaiting_review"])
    c5.metric(
        "Failures in a row",
        folds["consecutive_failures"],
        help="Folds the memory model failed since it last answered with a diff.",
    )
    if folds["consecutive_failures"] >= 2:
        st.warning(
            f"The memory model failed the last {folds['consecutive_failures']} folds in a row: "
            "check the last error below, `memory.model_name` and the model server "
            "(`deerflow-nb doctor`).",
            icon=":material/error:",
        )
    last_fold(info, folds["recent"][0] if folds["recent"] else None)
    err = info["last_error"]
    if err:
        st.warning(
            f"**Last error** (thread {code(err['thread_id'])}, attempt {md(err['attempts'])}): "
            f"{md_lines(err['last_error'])}"
        )
    else:
        st.markdown("**Last error**: none")
    if info["queue"]:
        st.markdown("**Queue**")
        table(
            view_models.frame(info["queue"], ("enqueued_at",)),
            column_order=(
                "thread_id", "status", "folding_now", "attempts", "enqueued_at", "last_error",
            ),
            column_config={
                "thread_id": st.column_config.TextColumn("thread", width=160),
                "status": st.column_config.TextColumn("status", width=80),
                "folding_now": st.column_config.CheckboxColumn("folding now", width=90),
                "attempts": st.column_config.NumberColumn("attempts", width=75),
                "enqueued_at": time_column("enqueued"),
                "last_error": st.column_config.TextColumn("last error", width=420),
            },
        )  # fmt: skip
    if folds["recent"]:
        with st.expander(f"Recent folds ({len(folds['recent'])})"):
            table(
                view_models.frame(data.fold_rows(folds["recent"]), ("time",)),
                column_config={
                    "time": time_column("time"),
                    "thread": st.column_config.TextColumn("thread", width=150),
                    "outcome": st.column_config.TextColumn("outcome", width=120),
                    "version": st.column_config.NumberColumn("version", width=70),
                    "what it did": st.column_config.TextColumn("what it did", width=520),
                },
            )
    st.markdown("**Files**")
    table(
        view_models.frame(info["files"]),
        column_config={
            "file": st.column_config.TextColumn("file", width=110),
            "path": st.column_config.TextColumn("path", width=620),
            "exists": st.column_config.CheckboxColumn("exists", width=70),
            "bytes": st.column_config.NumberColumn("bytes", width=110),
        },
    )


def last_fold(info: dict[str, Any], fold: dict[str, Any] | None) -> None:
    """The last fold's report from the fold log: outcome, what it added, reinforced,
    removed and evicted, the items it left out and why, what it held for review."""
    if fold is None:
        old = info["last_fold"]  # a journal from before fold reports: its last fold version
        if old:
            st.markdown(
                f"**Last fold**: v{old['version']} at {when(old['at'])} UTC from "
                f"{code(old['source'])}"
            )
        else:
            st.markdown("**Last fold**: none yet")
        return
    version = f" → v{fold['version']}" if fold.get("version") else ""
    with st.container(border=True):
        st.markdown(
            f"**Last fold**: {md(fold['outcome'])}{version} · {when(fold['at'])} UTC · "
            f"thread {code(fold['source'])}"
        )
        if fold["outcome"] == "failed":
            st.markdown(f"Error: {md_lines(fold.get('error') or 'unknown')}")
        counts = [
            f"{len(fold[key])} {key}"
            for key in ("added", "reinforced", "removed", "evicted", "sections")
            if fold.get(key)
        ]
        counts.append(f"{len(fold['left_out'])} left out")
        st.caption(" · ".join(counts))
        if fold["left_out"]:
            table(
                view_models.frame(
                    [
                        {
                            "item": str(x.get("item", "")),
                            "reason": str(x.get("reason", "")),
                            "value": str(x.get("value", "")),
                        }
                        for x in fold["left_out"]
                    ]
                ),
                column_config={
                    "item": st.column_config.TextColumn("left out", width=140),
                    "reason": st.column_config.TextColumn("reason", width=360),
                    "value": st.column_config.TextColumn("value", width=360),
                },
            )
        for held in fold.get("held") or []:
            change = f" as change #{fold['pending_id']}" if fold.get("pending_id") else ""
            st.markdown(
                f":material/pending: Held for review{change}: {md(held.get('item', ''))} "
                f"({md(held.get('reason', ''))}); see the Pending changes tab."
            )
