"""The inspector's frame: the header, the summary strip and the tabs (``main``).

Page setup, the controls, the empty and damaged states, and the tabs, all drawn from
one reading of the home.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import streamlit as st

from ...config import resolve_home
from .. import data
from .confirm import show_flash
from .facts import facts_page
from .history import history_page
from .injection import injection_page
from .markup import code, md, when
from .pending import pending_page
from .status import status_page
from .threads import threads_page
from .versions import versions_page

TAB_KEY = "inspector_tab"
TABS = (
    "Facts",
    "Pending changes",
    "Confidence history",
    "Injection preview",
    "Threads",
    "Versions",
    "Status",
)


def main() -> None:
    """The whole app: page setup, the header with its controls, then the tabs (live when
    asked)."""
    # An emoji icon is drawn in the page (a data: URL); a ``:material/…:`` one would be
    # fetched from fonts.gstatic.com, and the inspector fetches nothing from anywhere.
    st.set_page_config(
        page_title="deerflow_nb inspector",
        page_icon="🧠",
        layout="wide",
        initial_sidebar_state="collapsed",
    )
    home = resolve_home(None)
    auto, every = controls(home)
    if auto:
        st.fragment(run_every=every)(render)(home)
    else:
        render(home)


def controls(home: Path) -> tuple[bool, float]:
    """Title, home, the refresh button and the auto-refresh switch, in one row at the top
    (no sidebar: the tables get the whole width); returns (auto, seconds)."""
    title, refresh, auto_col, every_col = st.columns(
        [6, 1.2, 1.4, 1.4], vertical_alignment="bottom"
    )
    with title:
        st.title("What the agent knows")
    refresh.button(
        "Refresh", key="refresh", icon=":material/refresh:", help="Read the files again now"
    )
    auto = auto_col.toggle("Auto-refresh", key="auto_refresh", help="Re-read the files on a timer")
    every = every_col.number_input(
        "Every (seconds)", min_value=1.0, max_value=600.0, value=5.0, step=1.0, key="every"
    )
    st.caption(f"Home: {code(home)}")
    return auto, float(every)


def render(home: Path) -> None:
    """Read the home once and draw the summary strip and every tab from that one reading."""
    show_flash()
    if home.exists() and not home.is_dir():
        st.error(
            f"**{code(home)} is a file, not a folder.** Point `DEERFLOW_NB_HOME` (or "
            "`deerflow-nb inspect --home`) at the home folder that holds memory.json.",
            icon=":material/folder_off:",
        )
        return
    if data.home_is_empty(home):
        empty_state(home)
        return
    with ExitStack() as stack:
        try:
            reader = stack.enter_context(data.open_home(home))
        except data.HomeError as exc:  # a damaged journal: memory.json's pages still work
            unreadable(exc)
            reader = stack.enter_context(data.open_home(home, journal=False))
        memory: dict[str, Any] | None = None
        try:
            memory = data.load_memory(reader)
        except data.MemoryFileError as exc:
            corrupted_state(home, exc)
        try:
            info, folds, pending = journal_state(home, reader)
        except data.HomeError as exc:  # an older journal: migrate it; memory.json still shows
            unreadable(exc)
            reader = stack.enter_context(data.open_home(home, journal=False))
            info, folds, pending = journal_state(home, reader)
        summary_strip(memory, info, folds, pending)
        # Keyed and tracked: the tab in use stays selected across the reruns a click
        # causes (an untracked st.tabs goes back to the first tab when the page above it
        # changes, e.g. when a flash message appears after Approve).
        tabs = st.tabs(list(TABS), key=TAB_KEY, on_change="rerun")
        pages: tuple[tuple[Callable[..., None], tuple[Any, ...]], ...] = (
            (facts_page, (home, memory, reader)),
            (pending_page, (home, reader, pending)),
            (history_page, (reader, memory)),
            (injection_page, (home, memory)),
            (threads_page, (home, reader)),
            (versions_page, (home, reader)),
            (status_page, (info, folds)),
        )
        for tab, (page, args) in zip(tabs, pages, strict=True):
            with tab:
                try:
                    page(*args)
                except data.HomeError as exc:  # a read this older journal cannot answer
                    unreadable(exc)


def journal_state(home: Path, reader: data.MemoryReader) -> tuple[dict, dict, list]:
    """The status, the fold reports and the pending changes: what the strip and tabs share."""
    return data.status(home, reader), data.fold_reports(reader), data.pending_changes(reader)


def unreadable(exc: Exception) -> None:
    """journal.db cannot be read (damaged, or older than a read needs): the one line that
    says why and what to do."""
    st.error(f"**journal.db cannot be read.** {md(exc)}", icon=":material/healing:")


def summary_strip(
    memory: dict[str, Any] | None,
    info: dict[str, Any],
    folds: dict[str, Any],
    pending: list[dict[str, Any]],
) -> None:
    """The numbers a user glances at: facts, changes awaiting review, queued folds, and
    what the last fold did, with the time of this reading."""
    c1, c2, c3, c4, c5 = st.columns([1, 1, 1, 2, 1.2])
    c1.metric("Facts", "–" if memory is None else len(memory.get("facts", [])))
    c2.metric(
        "Pending changes",
        len(pending),
        help="Folds held for review: approve or reject them on the Pending changes tab.",
    )
    c3.metric("Queued folds", info["pending"] + info["failed"])
    last = folds["recent"][0] if folds["recent"] else None
    c4.metric(
        "Last fold",
        md(last["outcome"]) if last else "none yet",
        help=None if last is None else f"At {when(last['at'])} UTC from {code(last['source'])}",
    )
    c5.metric("Read at (UTC)", datetime.now(UTC).strftime("%H:%M:%S"))


def empty_state(home: Path) -> None:
    """A missing or empty home: say what will appear here and how to get started."""
    where = "does not exist yet" if not home.exists() else "holds no memory.json or journal yet"
    st.info(
        f"**Nothing remembered yet.** The home folder {code(home)} {where}.\n\n"
        "Memory appears here as soon as an agent has talked with you: in a notebook, run "
        "`%load_ext deerflow_nb`, then an `%%agent` cell that says something about you "
        '("I prefer polars over pandas"). Or bring an existing DeerFlow memory with '
        f"{code(f'deerflow-nb import memory.json --home {home}')}. This page refreshes itself "
        "when you press Refresh or turn on auto-refresh.",
        icon=":material/eco:",
    )


def corrupted_state(home: Path, exc: data.MemoryFileError) -> None:
    """A damaged memory.json: what is wrong, where the bad copy is, how to get memory back."""
    copies = "".join(f"\n- {code(p)}" for p in data.set_aside_copies(home))
    kept = ", and copies of damaged bytes a kernel kept aside are in:" if copies else "."
    st.error(
        f"**memory.json cannot be read.** {md(exc)}\n\n"
        f"Reading it changed nothing: {code(home / data.MEMORY_FILENAME)} stays as it is until "
        f"you recover{kept}"
        f"{copies}\n\n"
        "**To recover**: roll back from the Versions tab below (this replaces memory.json "
        "with the version you pick), or run `%memory rollback <version>` in the notebook or "
        f"{code(f'deerflow-nb fold --rebuild --home {home}')} in a shell. Facts cannot be "
        "edited until then; threads and history come from the journal and are unaffected.",
        icon=":material/healing:",
    )
