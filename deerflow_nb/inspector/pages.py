"""Streamlit rendering of the inspector: one function per tab, plus the shared frame.

The pages only lay out what ``data`` computes and hand writes to ``actions``. Writes
are asked for with one click and carried out with a second (the confirmation), both in
widget callbacks, so the page that follows already reads the files as they now are; the
one exception is the Approve or Reject button of a single pending change, which names
the change it acts on (approving or rejecting them all asks first). The recall search
(Threads tab) also goes through ``actions``: ``Memory.recall`` catches its index up.

Everything read from the home (memory.json, journal.db, config errors, exception
messages) is untrusted: a prompt injection or an imported memory.json can hold
``![](http://…)`` or ``<img onerror=…>``. Streamlit renders Markdown in ``st.markdown``,
captions, alerts, expander and metric labels, and loads any image it finds there. So
such text reaches those only through ``md``/``md_lines`` (every ASCII punctuation
backslash-escaped: literal in CommonMark) or ``code`` (an id or path in code style when
it is plain, escaped otherwise); option labels of a select box are plain text and go
through ``plain`` (a radio's options are Markdown: ``md``); tables (``st.dataframe``)
and ``st.code`` show text as text. ``unsafe_allow_html`` is never used.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import streamlit as st

from ..config import ConfigError, load_settings, resolve_home
from ..untrusted import clean_text, escape_markdown
from . import actions, data, view_models

TABS = (
    "Facts",
    "Pending changes",
    "Confidence history",
    "Injection preview",
    "Threads",
    "Versions",
    "Status",
)
_CONFIRM = "inspector_confirm"
_FLASH = "inspector_flash"
_PLAIN_ID = re.compile(r"[A-Za-z0-9_./-][A-Za-z0-9_./ -]{0,300}")


# -- untrusted text into Markdown ------------------------------------------------------------
def md(text: object) -> str:
    """Untrusted text as literal Markdown on one line (for labels and inline use)."""
    return escape_markdown(text)


def md_lines(text: object) -> str:
    """Untrusted text as literal Markdown, its line breaks kept."""
    lines = (escape_markdown(line) for line in clean_text(text).splitlines())
    return "  \n".join(line for line in lines if line)


def code(text: object) -> str:
    """An id, a path or a command in code style when it is plain (letters, digits, spaces,
    ``_./-``); any other text escaped instead (a code span is literal in CommonMark, but
    Streamlit still rewrites ``:icon:`` directives inside it)."""
    text = clean_text(text)
    return f"`{text}`" if _PLAIN_ID.fullmatch(text) else md(text)


def plain(text: object, limit: int | None = None) -> str:
    """Untrusted text for a plain-text label (a select box option): one clean line."""
    line = " ".join(clean_text(text).split())
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


# -- the frame -----------------------------------------------------------------------------
TIME_FORMAT = "YYYY-MM-DD HH:mm"  # tables (a 24-hour clock, UTC like the journal)


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
    _show_flash()
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
    memory: dict[str, Any] | None = None
    try:
        memory = data.load_memory(home)
    except data.MemoryFileError as exc:
        corrupted_state(home, exc)
    with ExitStack() as stack:
        try:
            db = stack.enter_context(data.open_journal(home))
        except data.HomeError as exc:  # a damaged journal: memory.json's pages still work
            st.error(f"**journal.db cannot be read.** {md(exc)}", icon=":material/healing:")
            db = None
        info = data.status(home, db)
        folds = data.fold_reports(db)
        pending = data.pending_changes(db, memory)
        summary_strip(memory, info, folds, pending)
        tabs = st.tabs(list(TABS))
        with tabs[0]:
            facts_page(home, memory)
        with tabs[1]:
            pending_page(home, db, pending)
        with tabs[2]:
            history_page(db)
        with tabs[3]:
            injection_page(home, memory)
        with tabs[4]:
            threads_page(home, db)
        with tabs[5]:
            versions_page(home, db)
        with tabs[6]:
            status_page(info, folds)


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


def clock(iso: object, *, seconds: bool = False) -> str | None:
    """An ISO timestamp as ``YYYY-MM-DD HH:MM`` (UTC, 24-hour), or as ``HH:MM:SS`` with
    ``seconds``; None when it is not one."""
    try:
        ts = datetime.fromisoformat(str(iso))
    except ValueError:
        return None
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC)
    return ts.strftime("%H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def when(iso: object, *, seconds: bool = False) -> str:
    """``clock`` for Markdown: other text escaped as it is."""
    return clock(iso, seconds=seconds) or md(iso)


def table(df: Any, **kwargs: Any) -> Any:
    """``st.dataframe`` the inspector's way: no index, and an empty cell left blank."""
    return st.dataframe(df, hide_index=True, placeholder="", **kwargs)


def time_column(label: str, width: int | str = 135) -> Any:
    """A table column of timestamps on a 24-hour clock."""
    return st.column_config.DatetimeColumn(label, format=TIME_FORMAT, width=width)


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
    st.error(
        f"**memory.json cannot be read.** {md(exc)}\n\n"
        f"Reading it changed nothing: {code(home / data.MEMORY_FILENAME)} stays as it is until "
        f"you recover, and a copy of the damaged bytes is kept aside in:"
        f"{copies or ' (no copy yet)'}\n\n"
        "**To recover**: roll back from the Versions tab below (this replaces memory.json "
        "with the version you pick), or run `%memory rollback <version>` in the notebook or "
        f"{code(f'deerflow-nb fold --rebuild --home {home}')} in a shell. Facts cannot be "
        "edited until then; threads and history come from the journal and are unaffected.",
        icon=":material/healing:",
    )


def _show_flash() -> None:
    flash = st.session_state.pop(_FLASH, None)
    if flash:
        ok, text = flash
        (st.success if ok else st.error)(text)


def _ask(action: dict[str, Any]) -> None:
    st.session_state[_CONFIRM] = action


def _cancel() -> None:
    st.session_state.pop(_CONFIRM, None)


def _confirm(home: Path) -> None:
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
            message = f"{done} {_count(result, 'change')} ({which})."
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


def _confirmation(home: Path, ops: tuple[str, ...]) -> None:
    """The second click of a write, shown where it was asked for."""
    action = st.session_state.get(_CONFIRM)
    if not action or action["op"] not in ops:
        return
    with st.container(border=True):
        st.warning(action["question"], icon=":material/warning:")
        left, right = st.columns(2)
        left.button("Confirm", key="confirm_yes", type="primary", on_click=_confirm, args=(home,))
        right.button("Cancel", key="confirm_no", on_click=_cancel)


# -- Facts ---------------------------------------------------------------------------------
def facts_page(home: Path, memory: dict[str, Any] | None) -> None:
    """Filter, sort, edit and forget facts."""
    if memory is None:
        if (home / data.MEMORY_FILENAME).exists():
            st.caption("Facts are unavailable while memory.json is damaged (see above).")
        else:
            st.info("No facts yet: memory.json has not been written.", icon=":material/eco:")
        return
    all_facts = memory.get("facts", [])
    c1, c2, c3, c4 = st.columns([2, 2, 3, 2])
    categories = c1.multiselect(
        "Category", list(data.CATEGORIES), key="facts_categories", placeholder="all"
    )
    low_high = c2.slider("Confidence", 0.0, 1.0, (0.0, 1.0), 0.05, key="facts_confidence")
    text = c3.text_input("Text contains", key="facts_text", placeholder="e.g. polars")
    sort = c4.selectbox("Sort", list(view_models.SORTS), key="facts_sort")
    rows = view_models.fact_rows(
        memory, categories=categories, confidence=low_high, text=text, sort=sort
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
                "category",
                "confidence",
                "updatedAt",
                "createdAt",
                "source",
                "id",
            ),
            column_config={
                "content": st.column_config.TextColumn("content", width=360),
                "category": st.column_config.TextColumn("category", width=90),
                "confidence": st.column_config.ProgressColumn(
                    "confidence", min_value=0.0, max_value=1.0, format="%.2f", width=100
                ),
                "updatedAt": time_column("updatedAt"),
                "createdAt": time_column("createdAt"),
                "source": st.column_config.TextColumn("source", width=110),
                "id": st.column_config.TextColumn("id", width=110),
            },
        )
    else:
        st.info(
            "No fact matches these filters." if all_facts else "No facts yet.",
            icon=":material/search_off:",
        )
    sections = view_models.section_rows(memory)
    if sections:
        with st.expander(f"User and history summaries ({len(sections)})"):
            for s in sections:
                st.markdown(
                    f"**{md(s['section'])}** · _{when(s['updatedAt'])}_\n\n{md_lines(s['summary'])}"
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
        on_click=_ask,
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
        on_click=_ask,
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
    _confirmation(home, ("edit", "forget"))


# -- Pending changes -----------------------------------------------------------------------------
_LINE_ICONS = {
    "add": ":material/add:",
    "remove": ":material/remove:",
    "section": ":material/notes:",
    "none": ":material/block:",
}


def pending_page(home: Path, db: Any, pending: list[dict[str, Any]]) -> None:
    """Folds held for review: what each would change, approved or rejected one by one or
    all at once (rejecting all asks first). Writes go through ``Memory.approve/reject``."""
    review = data.review_mode(db, home)
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
    st.markdown(f"**{_count(len(pending), 'change')} waiting for review**, oldest first.")
    b1, b2, _ = st.columns([1, 1, 4])
    b1.button(
        "Approve all…",
        key="pending_approve_all",
        icon=":material/done_all:",
        on_click=_ask,
        args=(
            {
                "op": "approve",
                "ids": "all",
                "question": f"Apply all {_count(len(pending), 'pending change')} to memory? "
                "Each is journaled as a fold and can be rolled back from the Versions tab.",
            },
        ),
    )
    b2.button(
        "Reject all…",
        key="pending_reject_all",
        icon=":material/delete_sweep:",
        on_click=_ask,
        args=(
            {
                "op": "reject",
                "ids": "all",
                "question": f"Reject all {_count(len(pending), 'pending change')}? They are "
                "dropped for good: memory stays as it is, and the threads are not folded again.",
            },
        ),
    )
    _confirmation(home, ("approve", "reject"))
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
                on_click=_decide,
                args=(home, "approve", change["id"]),
            )
            reject.button(
                "Reject",
                key=f"pending_reject_{change['id']}",
                icon=":material/close:",
                on_click=_decide,
                args=(home, "reject", change["id"]),
            )
            st.markdown(
                "\n".join(
                    f"- {_LINE_ICONS.get(kind, '')} {kind} {md(text)}"
                    for kind, text in change["lines"]
                )
            )


def _decide(home: Path, op: str, change_id: int) -> None:
    """Approve or reject one pending change (one click: it names the change it acts on)."""
    _cancel()
    st.session_state[_CONFIRM] = {"op": op, "ids": [change_id]}
    _confirm(home)


CHART_HEIGHT = 360  # the confidence chart's plot area, axis and legend not counted
LEGEND_MAX = 15  # facts named in the legend; more are told apart by tooltip and picker
_MIN_SPAN_MS = 10 * 60 * 1000  # a time axis spans at least ten minutes


def time_axis(times: Any) -> Any:
    """The time axis of a chart: UTC on a 24-hour clock, the date added when the data
    spans more than a day, and at least ten minutes wide (a demo's events, seconds apart,
    would otherwise get ticks every few milliseconds)."""
    import altair as alt

    valid = times.dropna()
    if valid.empty:
        return alt.X("ts:T", title="time (UTC)")
    low, high = valid.min(), valid.max()
    pad = max(pd_timedelta(0), pd_timedelta(_MIN_SPAN_MS) - (high - low)) / 2
    spec = "%H:%M" if (high - low).total_seconds() < 86_400 else "%Y-%m-%d %H:%M"

    def point(ts: Any) -> Any:  # a domain end (Streamlit's renderer drops plain numbers)
        ts = ts.tz_convert("UTC")
        return alt.DateTime(
            year=ts.year, month=ts.month, date=ts.day, hours=ts.hour, minutes=ts.minute,
            seconds=ts.second, milliseconds=ts.microsecond // 1000, utc=True,
        )  # fmt: skip

    # The label is written by ``utcFormat`` itself: Streamlit's renderer ignores an axis
    # ``format`` whose ``formatType`` is "utc" and falls back to a 12-hour clock.
    return alt.X(
        "ts:T",
        title="time (UTC)",
        scale=alt.Scale(type="utc", domain=[point(low - pad), point(high + pad)], nice=False),
        axis=alt.Axis(
            labelExpr=f"utcFormat(datum.value, '{spec}')",
            tickMinStep=60_000,  # never two ticks in one minute (their labels would repeat)
            labelOverlap=True,
            labelAngle=0,
            labelFlush=True,
        ),
    )


def pd_timedelta(ms: int) -> Any:
    import pandas as pd

    return pd.Timedelta(milliseconds=ms)


def _stamp(df: Any) -> Any:
    """``df`` with ``at``: its ``ts`` as ``YYYY-MM-DD HH:MM:SS`` text, for tooltips."""
    df["at"] = df["ts"].dt.strftime("%Y-%m-%d %H:%M:%S")
    return df


# -- Confidence history ------------------------------------------------------------------------
def history_page(db: Any) -> None:
    """Each fact's confidence over time with additions and removals marked; memory size."""
    import altair as alt

    events = data.events(db)
    points = view_models.confidence_series(events)
    st.subheader("Confidence over time")
    if not points:
        st.info(
            "No memory events yet: the history starts with the first fact.",
            icon=":material/show_chart:",
        )
    else:
        facts = sorted({p["fact"] for p in points})
        chosen = st.multiselect(
            "Facts",
            facts,
            key="history_facts",
            placeholder=f"all {len(facts)} facts",
            format_func=plain,
        )
        shown = view_models.dodge([p for p in points if not chosen or p["fact"] in chosen])
        df = _stamp(view_models.frame(shown, ("ts",)))
        named = len({p["fact"] for p in shown})
        legend = (
            alt.Legend(orient="bottom", direction="vertical", columns=1, labelLimit=0, title=None)
            if named <= LEGEND_MAX
            else None
        )
        base = alt.Chart(df).encode(
            x=time_axis(df["ts"]),
            xOffset=alt.XOffset("offset:Q", scale=None),
            y=alt.Y("confidence:Q", scale=alt.Scale(domain=[0, 1]), title="confidence"),
            color=alt.Color("fact:N", legend=legend),
        )
        marks = base.mark_point(
            filled=True, size=110, opacity=0.95, stroke="white", strokeWidth=1
        ).encode(
            shape=alt.Shape(
                "event:N",
                scale=alt.Scale(
                    domain=["added", "changed", "removed"],
                    range=["triangle-up", "circle", "cross"],
                ),
                title="event",
                legend=alt.Legend(
                    orient="right", symbolFillColor="#555", symbolStrokeColor="#555", symbolSize=110
                ),
            ),
            tooltip=["fact", "event", "kind", alt.Tooltip("confidence:Q", format=".2f"),
                     alt.Tooltip("at:N", title="time (UTC)"), "source"],
        )  # fmt: skip
        # The chart's height holds the axis and the legend too: add room for them.
        height = CHART_HEIGHT + 60 + (22 * named + 10 if legend is not None else 0)
        st.altair_chart(
            (base.mark_line(strokeWidth=1.5, opacity=0.6) + marks).properties(height=height),
            key="history_chart",
        )
        if legend is None:
            st.caption(
                f"{named} facts: hover a point to see which, or pick facts above to name them "
                "in a legend."
            )
        counts = {k: sum(p["event"] == k for p in shown) for k in ("added", "changed", "removed")}
        st.caption(
            f"{counts['added']} added (triangles) · {counts['changed']} changed (circles) · "
            f"{counts['removed']} removed (crosses)"
        )
    sizes = data.size_series(db)
    st.subheader("Memory size over time")
    if sizes:
        df = _stamp(view_models.frame(sizes, ("ts",)))
        size_chart = (
            alt.Chart(df)
            .mark_line(interpolate="step-after", point=True)
            .encode(
                x=time_axis(df["ts"]),
                y=alt.Y("facts:Q", title="facts"),
                tooltip=[
                    "version",
                    "reason",
                    "facts",
                    "kilobytes",
                    alt.Tooltip("at:N", title="time (UTC)"),
                ],
            )  # fmt: skip
            .properties(height=260)
        )
        st.altair_chart(size_chart, key="size_chart")
    else:
        st.caption("No saved versions yet.")
    if events:
        with st.expander(f"Event log ({len(events)})"):
            table(
                view_models.frame(view_models.event_rows(events), ("time",)),
                column_config={
                    "time": time_column("time"),
                    "kind": st.column_config.TextColumn("kind", width=80),
                    "fact": st.column_config.TextColumn("fact", width=110),
                    "change": st.column_config.TextColumn("change", width=440),
                    "confidence": st.column_config.TextColumn("confidence", width=100),
                    "source": st.column_config.TextColumn("source", width=120),
                },
            )


# -- Injection preview ---------------------------------------------------------------------------
@st.cache_resource(show_spinner="Loading the embedding model…")
def _embedder(home: str, spec: str) -> Any:
    """One embedder per home and setting for the app's lifetime (models are slow to load)."""
    return data.embedder_for(Path(home))


def injection_page(home: Path, memory: dict[str, Any] | None) -> None:
    """The exact <memory> block for a context and budget, and why each fact made it in."""
    embedder = None
    try:
        settings = load_settings(home)
        budget = settings.memory.max_injection_tokens
        if settings.memory.embeddings:
            embedder = _embedder(str(home), settings.memory.embeddings)
    except ConfigError as exc:
        st.warning(f"config.yaml: {md(exc)}; previewing with the default settings.")
        budget = 2000
    except (ImportError, OSError) as exc:
        st.warning(
            f"Embeddings are configured but unavailable here ({md(exc)}); lexical ranking only."
        )
    context = st.text_area(
        "Context: the next message or cell the agent will see",
        key="inject_context",
        placeholder="e.g. plot the sales data with my usual dataframe library",
    )
    max_tokens = st.slider("Token budget", 0, max(8000, budget), budget, 50, key="inject_budget")
    if memory is None:
        st.info(
            "Nothing would be injected: there is no readable memory.json.", icon=":material/eco:"
        )
        return
    preview = view_models.injection_preview(memory, context or None, max_tokens, embedder=embedder)
    c1, c2 = st.columns(2)
    c1.metric("Tokens in the block", f"{preview['tokens']} / {max_tokens}")
    c2.metric("Facts included", f"{len(preview['facts'])} / {preview['total_facts']}")
    if preview["block"]:
        st.code(preview["block"], language="xml", wrap_lines=True)
    else:
        st.info("The block is empty: nothing fits this budget, or memory is empty.")
    if preview["facts"]:
        st.markdown(
            "**Why these facts**, in the order of the block: `total` combines relevance, "
            "confidence, recency and specificity; `rank` is the fact's place in the whole ranking."
        )
        dense = any(f["dense"] is not None for f in preview["facts"])
        score = {
            name: st.column_config.NumberColumn(name, format="%.3f", width=90)
            for name in ("total", "relevance", "lexical", "dense", "confidence", "recency",
                         "specificity")
        }  # fmt: skip
        table(
            view_models.frame(preview["facts"]),
            column_order=(
                "rank", "content", "total", "relevance", "confidence", "recency", "specificity",
                "lexical", *(("dense",) if dense else ()), "id",
            ),
            column_config={
                "rank": st.column_config.NumberColumn("rank", width=55),
                "content": st.column_config.TextColumn("content", width=360),
                "id": st.column_config.TextColumn("id", width=110),
                **score,
            },
        )  # fmt: skip


# -- Threads -----------------------------------------------------------------------------------
RECALL_K = 10
THREADS_LISTED = 50  # lead threads in the list (newest first), with their sub-agents


@st.cache_data(max_entries=32, show_spinner="Searching the journal…")
def _recall(home: str, query: str, k: int, stamp: tuple[int, ...]) -> tuple[bool, Any]:
    """``Memory.recall`` once per query and state of the journal (``stamp``), so an
    auto-refresh does not search again until something new is journaled."""
    return actions.run(actions.recall, Path(home), query, k)


def _journal_stamp(home: Path) -> tuple[int, ...]:
    stamp: list[int] = []
    for name in (data.JOURNAL_FILENAME, data.JOURNAL_FILENAME + "-wal"):
        try:
            st_ = (home / name).stat()
            stamp += [st_.st_mtime_ns, st_.st_size]
        except OSError:
            stamp += [0, 0]
    return tuple(stamp)


def threads_page(home: Path, db: Any) -> None:
    """Recall over every conversation on top; below, the threads (sub-agents under their
    parent) beside the one picked: its summary, its turns in words, its transcript."""
    tree = data.thread_tree(db)
    if not tree:
        st.info("No conversations journaled yet.", icon=":material/forum:")
        return
    flat = [n for root in tree for n in (root, *root["children"])]
    by_id = {n["id"]: n for n in flat}
    recall_box(home, by_id)
    if st.session_state.get("thread_pick") not in by_id:
        st.session_state["thread_pick"] = flat[0]["id"]
    listed = [n["id"] for root in tree[:THREADS_LISTED] for n in (root, *root["children"])]
    picked = st.session_state["thread_pick"]
    if picked not in listed:  # an older thread opened from a recall result
        listed.append(picked)
    left, right = st.columns([1, 2.4], gap="large")
    with left:
        more = len(tree) - THREADS_LISTED
        st.radio(
            f"Threads ({len(tree)})",
            listed,
            key="thread_pick",
            format_func=lambda i: _thread_label(by_id[i]),
        )
        if more > 0:
            st.caption(
                f"The {THREADS_LISTED} most recent are listed; search above to open any of "
                f"the {more} older ones."
            )
    with right:
        thread_detail(db, by_id[st.session_state["thread_pick"]])


def recall_box(home: Path, by_id: dict[str, dict[str, Any]]) -> None:
    """The recall search: journaled user messages and replies of lead threads, best first
    (``Memory.recall``); Open shows a result's thread below."""
    query = st.text_input(
        "Search every conversation (recall)",
        key="recall_query",
        placeholder="e.g. what did I say about the sales data?",
        help="Searches the user messages and final replies of every lead thread in the "
        "journal, as the agent's recall tool does.",
    ).strip()
    if not query:
        return
    ok, results = _recall(str(home), query, RECALL_K, _journal_stamp(home))
    if not ok:
        st.error(f"Recall failed: {md(results)}", icon=":material/error:")
        return
    rows = view_models.recall_rows(results)
    if not rows:
        st.info("No message matches this search.", icon=":material/search_off:")
        return
    with st.container(border=True):
        st.caption(f"{_count(len(rows), 'result')}, best first")
        for i, row in enumerate(rows):
            node = by_id.get(row["thread"])
            name = f"**{md(row['thread'])}**" if node else md(row["thread"])
            go, text = st.columns([1, 9], vertical_alignment="top")
            go.button(
                "Open",
                key=f"recall_open_{i}",
                icon=":material/arrow_downward:",
                disabled=node is None,
                on_click=_open_thread,
                args=(row["thread"],),
                help="Show this thread and its transcript below",
            )
            text.markdown(
                f"{name} · {when(row['date'])} · {md(row['role'])} · score {row['score']:.3f}"
                f"  \n{md(row['excerpt'])}"
            )


def _open_thread(thread_id: str) -> None:
    st.session_state["thread_pick"] = thread_id


def _thread_label(node: dict[str, Any]) -> str:
    """A thread's line in the list (Markdown, escaped): name, turns, tokens, marks."""
    label = f"{_thread_name(node, markdown=True)} · {_count(len(node['turns']), 'turn')}"
    if node["kind"] == "subagent":
        label = f"↳ {label}"
    if node["children"]:
        label += f" · {_count(len(node['children']), 'sub-agent')}"
    if node["summaries"]:
        label += " · summarized"
    return label


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _thread_name(node: dict[str, Any], *, markdown: bool = False) -> str:
    """A lead thread by its name (``%%agent -t NAME``) and then its first message; a
    sub-agent by its task. Escaped for Markdown when ``markdown``, else plain text."""
    esc = md if markdown else plain
    first = plain(node["title"], 70)
    if node["kind"] == "subagent":
        return f"sub-agent · {esc(first)} (of {esc(node['parent_id'] or '?')})"
    name = f"**{esc(node['id'])}**" if markdown else esc(node["id"])
    return name if node["title"] == node["id"] else f"{name} · “{esc(first)}”"


def thread_detail(db: Any, node: dict[str, Any]) -> None:
    """One thread: who, when, usage, its summaries, turns, sub-agents and transcript."""
    st.markdown(f"#### {_thread_name(node, markdown=True)}")
    st.caption(
        f"{code(node['id'])} · {md(node['kind'])} · model {md(node['model'] or '?')} · "
        f"{node['messages']} messages ({node['message_tokens']} tokens) · "
        f"{node['input_tokens']} in / {node['output_tokens']} out tokens · "
        f"started {when(node['created_at'])} · last {when(node['updated_at'])} UTC"
    )
    for s in node["summaries"]:
        st.info(
            f"**Summary** of messages 1–{md(s['covers_until_seq'])} "
            f"({md(s['tokens'])} tokens, {when(s['created_at'])}):\n\n{md_lines(s['content'])}",
            icon=":material/summarize:",
        )
    turns = data.turn_rows(db, node)
    if turns:
        st.markdown(f"**{_count(len(turns), 'turn')}**")
        table(
            view_models.frame(turns, ("started",)),
            column_config={
                "started": time_column("started"),
                "message": st.column_config.TextColumn("message", width=180),
                "reply": st.column_config.TextColumn("reply", width=180),
                "status": st.column_config.TextColumn("status", width=70),
                "input_tokens": st.column_config.NumberColumn("in", width=55),
                "output_tokens": st.column_config.NumberColumn("out", width=55),
                "facts_injected": st.column_config.NumberColumn("facts", width=55),
            },
        )
    if node["children"]:
        st.markdown(f"**{_count(len(node['children']), 'sub-agent')}** (pick one on the left)")
        for child in node["children"]:
            st.markdown(
                f"- :material/subdirectory_arrow_right: **sub-agent** · {md(child['title'])} · "
                f"{_count(len(child['turns']), 'turn')} · {child['input_tokens']} in / "
                f"{child['output_tokens']} out tokens"
            )
    transcript(data.thread_messages(db, node["id"]))


TRANSCRIPT_MAX = 200  # messages shown at once (the newest)
_AVATARS = {"user": "user", "assistant": "assistant"}


def transcript(messages: list[dict[str, Any]]) -> None:
    """A thread's messages as a conversation, newest last; a tool's result as text in a
    collapsed block (a DataFrame's head keeps its columns)."""
    if not messages:
        return
    st.markdown(f"**Transcript** · {_count(len(messages), 'message')}")
    if len(messages) > TRANSCRIPT_MAX:
        st.caption(f"The newest {TRANSCRIPT_MAX} are shown.")
        messages = messages[-TRANSCRIPT_MAX:]
    for m in messages:
        role = m["role"]
        avatar = _AVATARS.get(role, ":material/build:" if role == "tool" else ":material/info:")
        with st.chat_message(_AVATARS.get(role, "ai"), avatar=avatar):
            st.caption(
                f"{md(role)} · #{m['seq']} · {when(m['time'], seconds=True)} · "
                f"{_count(m['tokens'], 'token')}"
            )
            if role == "tool":
                with st.expander(f"Tool result ({_count(len(m['content']), 'character')})"):
                    st.code(m["content"], language=None, wrap_lines=True)
            elif m["content"]:
                st.markdown(md_lines(m["content"]))


# -- Versions ----------------------------------------------------------------------------------
def versions_page(home: Path, db: Any) -> None:
    """Diff any two saved versions; roll back to one after a confirmation."""
    listed = data.versions(db)
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
    diff = view_models.diff_snapshots(
        data.version_snapshot(db, old), data.version_snapshot(db, new)
    )
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
        f"- :material/notes: {s['section']}: “{md(s['old'])}” → “{md(s['new'])}”"
        for s in diff["sections"]
    ]
    if lines:
        st.markdown(f"**v{old} → v{new}**\n\n" + "\n".join(lines))
    st.divider()
    target = st.selectbox("Roll back to", ids, index=0, key="ver_rollback", format_func=label)
    st.button(
        "Roll back…",
        key="ver_rollback_go",
        on_click=_ask,
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
    _confirmation(home, ("rollback",))
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


# -- Status ------------------------------------------------------------------------------------
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
