"""The inspector's writes in two clicks: asked for, then confirmed and carried out.

A page asks (``ask``), the user confirms (``confirmation``), and ``confirm`` carries the
write out through ``actions`` and leaves a message for the page.

Both clicks run in widget callbacks, so the page that follows already reads the files as
they now are; a single pending change's Approve or Reject (``decide``) needs one click.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from .. import actions
from .markup import code, count, md

_CONFIRM = "inspector_confirm"
_FLASH = "inspector_flash"


def show_flash() -> None:
    """The message the last confirmed write left, shown once."""
    flash = st.session_state.pop(_FLASH, None)
    if flash:
        ok, text = flash
        (st.success if ok else st.error)(text)


def ask(action: dict[str, Any]) -> None:
    """The first click: remember the write, to be confirmed where it was asked for."""
    st.session_state[_CONFIRM] = action


def cancel() -> None:
    """Drop the write waiting for confirmation."""
    st.session_state.pop(_CONFIRM, None)


def confirm(home: Path) -> None:
    """Carry out the pending write through the Memory API and leave a message for the page."""
    action = st.session_state.pop(_CONFIRM, None)
    if not action:
        return
    op = action["op"]
    if op == "edit":
        ok, result = actions.run(
            actions.edit_fact,
            home,
            action["fact_id"],
            content=action.get("content"),
            category=action.get("category"),
            confidence=action.get("confidence"),
        )
        message = f"Saved fact {code(action['fact_id'])}." if ok else f"Edit failed: {md(result)}"
    elif op == "forget":
        ok, result = actions.run(actions.forget_fact, home, action["fact_id"])
        message = (
            f"Forgot fact {code(action['fact_id'])}." if ok else f"Forget failed: {md(result)}"
        )
    elif op in ("approve_item", "reject_item"):
        verb = op.removesuffix("_item")
        number, change_id = action["number"], action["change_id"]
        ok, result = actions.run(actions.decide_items, home, verb, change_id, [number])
        if not ok:
            message = f"{verb.capitalize()} failed: {md(result)}"
        elif result == 0:
            ok, message = False, f"Nothing to {verb}: change #{change_id} was decided meanwhile."
        else:
            done = "Approved" if verb == "approve" else "Rejected"
            message = f"{done} item {number} of change #{change_id}."
    elif op in ("approve", "reject"):
        write = actions.approve if op == "approve" else actions.reject
        ok, result = actions.run(write, home, action["ids"])
        which = (
            "all pending changes"
            if action["ids"] == "all"
            else ("change " + ", ".join(f"#{i}" for i in action["ids"]))
        )
        if not ok:
            message = f"{op.capitalize()} failed: {md(result)}"
        elif result == 0:
            ok, message = False, f"Nothing to {op}: {which} was decided meanwhile."
        else:
            done = "Approved" if op == "approve" else "Rejected"
            message = f"{done} {count(result, 'change')} ({which})."
    else:
        ok, result = actions.run(actions.rollback, home, action["version"])
        message = (
            f"Rolled memory back to version {action['version']}."
            if ok
            else f"Rollback failed: {md(result)}"
        )
    for key in [k for k in st.session_state if str(k).startswith("edit_")]:
        del st.session_state[key]
    st.session_state[_FLASH] = (ok, message)


def confirmation(home: Path, ops: tuple[str, ...]) -> None:
    """The second click of a write, shown where it was asked for."""
    action = st.session_state.get(_CONFIRM)
    if not action or action["op"] not in ops:
        return
    with st.container(border=True):
        st.warning(action["question"], icon=":material/warning:")
        left, right = st.columns(2)
        left.button("Confirm", key="confirm_yes", type="primary", on_click=confirm, args=(home,))
        right.button("Cancel", key="confirm_no", on_click=cancel)


def decide(home: Path, op: str, change_id: int, number: int | None = None) -> None:
    """Approve or reject one pending change, or one item of it (one click: it names what
    it acts on)."""
    cancel()
    if number is None:
        st.session_state[_CONFIRM] = {"op": op, "ids": [change_id]}
    else:
        st.session_state[_CONFIRM] = {
            "op": f"{op}_item",
            "change_id": change_id,
            "number": number,
        }
    confirm(home)
