"""The Pending changes tab: folds held for review, approved or rejected one by one or all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from ..data import MemoryReader
from .confirm import ask, confirmation, decide
from .markup import code, count, md, when

_LINE_ICONS = {
    "add": ":material/add:",
    "remove": ":material/remove:",
    "merge": ":material/merge:",
    "edit": ":material/edit:",
    "section": ":material/notes:",
}


def pending_page(home: Path, reader: MemoryReader, pending: list[dict[str, Any]]) -> None:
    """Folds held for review: each fact each would add, remove or merge, in full; a change
    or one item of it approved or rejected with one click, or all at once (rejecting all
    asks first). Writes go through ``Memory.approve/reject``."""
    review = reader.review
    mode = (
        "Review mode is **on**: every fold waits here until you approve it "
        "(`%memory review off` in a notebook turns it off)."
        if review
        else "Review mode is **off**: folds apply at once; a fold the wipe guard holds back "
        "still waits here."
    )
    st.caption(mode)
    if not pending:
        st.info("No pending changes: nothing waits for review.", icon=":material/task_alt:")
        return
    st.markdown(f"**{count(len(pending), 'change')} waiting for review**, oldest first.")
    b1, b2, _ = st.columns([1, 1, 4])
    b1.button(
        "Approve all…",
        key="pending_approve_all",
        icon=":material/done_all:",
        on_click=ask,
        args=(
            {
                "op": "approve",
                "ids": "all",
                "question": f"Apply all {count(len(pending), 'pending change')} to memory? "
                "Each is journaled as a fold and can be rolled back from the Versions tab.",
            },
        ),
    )
    b2.button(
        "Reject all…",
        key="pending_reject_all",
        icon=":material/delete_sweep:",
        on_click=ask,
        args=(
            {
                "op": "reject",
                "ids": "all",
                "question": f"Reject all {count(len(pending), 'pending change')}? They are "
                "dropped for good: memory stays as it is, and the threads are not folded again.",
            },
        ),
    )
    confirmation(home, ("approve", "reject"))
    for change in pending:
        with st.container(border=True):
            head, approve, reject = st.columns([6, 1, 1], vertical_alignment="center")
            head.markdown(
                f"**Change #{change['id']}** · from thread {code(change['source'])} · "
                f"{when(change['created_at'])} UTC"
            )
            approve.button(
                "Approve",
                key=f"pending_approve_{change['id']}",
                icon=":material/check:",
                type="primary",
                help=f"Apply every item of change #{change['id']}",
                on_click=decide,
                args=(home, "approve", change["id"]),
            )
            reject.button(
                "Reject",
                key=f"pending_reject_{change['id']}",
                icon=":material/close:",
                help=f"Drop every item of change #{change['id']}",
                on_click=decide,
                args=(home, "reject", change["id"]),
            )
            for item in change["items"]:
                _item_row(home, change["id"], item)


def _item_row(home: Path, change_id: int, item: dict[str, Any]) -> None:
    """One fact added, removed or merged (or a section rewritten), in full, with its own
    Approve and Reject: the rest of the change keeps waiting."""
    text, approve, reject = st.columns([6, 1, 1], vertical_alignment="center")
    head = f"{md(item['fact_id'])}: " if item.get("fact_id") else ""
    if item["kind"] == "section":
        head = f"{md(item['detail'])}: "
    detail = f" ({md(item['detail'])})" if item["detail"] and item["kind"] != "section" else ""
    text.markdown(
        f"{item['number']}. {_LINE_ICONS.get(item['kind'], '')} {item['kind']} "
        f"{head}{md(item['text'])}{detail}"
    )
    number = item["number"]
    approve.button(
        "Approve",
        key=f"pending_item_approve_{change_id}_{number}",
        help=f"Apply only item {number} of change #{change_id}",
        on_click=decide,
        args=(home, "approve", change_id, number),
    )
    reject.button(
        "Reject",
        key=f"pending_item_reject_{change_id}_{number}",
        help=f"Drop only item {number} of change #{change_id}",
        on_click=decide,
        args=(home, "reject", change_id, number),
    )
