"""Streamlit rendering of the inspector: one function per tab, plus the shared frame.

The pages only lay out what ``data`` computes and hand writes to ``actions``. Writes
are asked for with one click and carried out with a second (the confirmation), both in
widget callbacks, so the page that follows already reads the files as they now are.

Everything read from the home (memory.json, journal.db, config errors, exception
messages) is untrusted: a prompt injection or an imported memory.json can hold
``![](http://…)`` or ``<img onerror=…>``. Streamlit renders Markdown in ``st.markdown``,
captions, alerts, expander and metric labels, and loads any image it finds there. So
such text reaches those only through ``md``/``md_lines`` (every ASCII punctuation
backslash-escaped: literal in CommonMark) or ``code`` (an id or path in code style when
it is plain, escaped otherwise); option labels of a select box are plain text and go
through ``plain``; tables (``st.dataframe``) and ``st.code`` show text as text.
``unsafe_allow_html`` is never used.
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
from . import actions, data

TABS = ("Facts", "Confidence history", "Injection preview", "Threads", "Versions", "Status")
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
def main() -> None:
    """The whole app: page setup, sidebar controls, then the tabs (live when asked)."""
    # An emoji icon is drawn in the page (a data: URL); a ``:material/…:`` one would be
    # fetched from fonts.gstatic.com, and the inspector fetches nothing from anywhere.
    st.set_page_config(page_title="deerflow_nb inspector", page_icon="🧠", layout="wide")
    home = resolve_home(None)
    auto, every = sidebar(home)
    if auto:
        st.fragment(run_every=every)(render)(home)
    else:
        render(home)


def sidebar(home: Path) -> tuple[bool, float]:
    """Home, the refresh button and the auto-refresh switch; returns (auto, seconds)."""
    with st.sidebar:
        st.markdown("### :material/psychology: deerflow_nb")
        st.caption(f"Home: {code(home)}")
        st.button(
            "Refresh", key="refresh", icon=":material/refresh:", help="Read the files again now"
        )
        auto = st.toggle("Auto-refresh", key="auto_refresh", help="Re-read the files on a timer")
        every = st.number_input(
            "Every (seconds)", min_value=1.0, max_value=600.0, value=5.0, step=1.0, key="every"
        )
    return auto, float(every)


def render(home: Path) -> None:
    """Read the home once and draw every tab from that one reading."""
    st.title("What the agent knows")
    st.caption(f"Read at {datetime.now(UTC).strftime('%H:%M:%S')} UTC")
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
        tabs = st.tabs(list(TABS))
        with tabs[0]:
            facts_page(home, memory)
        with tabs[1]:
            history_page(db)
        with tabs[2]:
            injection_page(home, memory)
        with tabs[3]:
            threads_page(db)
        with tabs[4]:
            versions_page(home, db)
        with tabs[5]:
            status_page(home, db)


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
    sort = c4.selectbox("Sort", list(data.SORTS), key="facts_sort")
    rows = data.fact_rows(memory, categories=categories, confidence=low_high, text=text, sort=sort)
    st.caption(
        f"{len(rows)} of {len(all_facts)} facts · last updated {md(memory.get('lastUpdated'))}"
    )
    if rows:
        st.dataframe(
            data.frame(rows),
            hide_index=True,
            column_config={
                "confidence": st.column_config.ProgressColumn(
                    "confidence", min_value=0.0, max_value=1.0, format="%.2f"
                ),
                "content": st.column_config.TextColumn("content", width="large"),
            },
        )
    else:
        st.info(
            "No fact matches these filters." if all_facts else "No facts yet.",
            icon=":material/search_off:",
        )
    sections = data.section_rows(memory)
    if sections:
        with st.expander(f"User and history summaries ({len(sections)})"):
            for s in sections:
                st.markdown(
                    f"**{md(s['section'])}** · _{md(s['updatedAt'])}_\n\n{md_lines(s['summary'])}"
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


# -- Confidence history ------------------------------------------------------------------------
def history_page(db: Any) -> None:
    """Each fact's confidence over time with additions and removals marked; memory size."""
    import altair as alt

    events = data.events(db)
    points = data.confidence_series(events)
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
        shown = [p for p in points if not chosen or p["fact"] in chosen]
        df = data.frame(shown, ("ts",))
        base = alt.Chart(df).encode(
            x=alt.X("ts:T", title="time"),
            y=alt.Y("confidence:Q", scale=alt.Scale(domain=[0, 1]), title="confidence"),
            color=alt.Color("fact:N", legend=alt.Legend(orient="bottom", columns=2, title=None)),
        )
        marks = base.mark_point(filled=True, size=110, opacity=1).encode(
            shape=alt.Shape(
                "event:N",
                scale=alt.Scale(
                    domain=["added", "changed", "removed"],
                    range=["triangle-up", "circle", "cross"],
                ),
                title="event",
            ),
            tooltip=["fact", "event", "kind", "confidence", "ts:T", "source"],
        )
        st.altair_chart(base.mark_line() + marks, key="history_chart")
        counts = {k: sum(p["event"] == k for p in shown) for k in ("added", "changed", "removed")}
        st.caption(
            f"{counts['added']} added (triangles) · {counts['changed']} changed (circles) · "
            f"{counts['removed']} removed (crosses)"
        )
    sizes = data.size_series(db)
    st.subheader("Memory size over time")
    if sizes:
        size_chart = (
            alt.Chart(data.frame(sizes, ("ts",)))
            .mark_line(interpolate="step-after", point=True)
            .encode(
                x=alt.X("ts:T", title="time"),
                y=alt.Y("facts:Q", title="facts"),
                tooltip=["version", "reason", "facts", "kilobytes", "ts:T"],
            )
        )
        st.altair_chart(size_chart, key="size_chart")
    else:
        st.caption("No saved versions yet.")
    if events:
        with st.expander(f"Event log ({len(events)})"):
            st.dataframe(
                data.frame(
                    [{k: v for k, v in e.items() if k != "details"} for e in reversed(events)]
                ),
                hide_index=True,
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
    preview = data.injection_preview(memory, context or None, max_tokens, embedder=embedder)
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
        st.dataframe(data.frame(preview["facts"]), hide_index=True)


# -- Threads -----------------------------------------------------------------------------------
def threads_page(db: Any) -> None:
    """Conversations from the journal, sub-agents under their parent, with token usage."""
    tree = data.thread_tree(db)
    if not tree:
        st.info("No conversations journaled yet.", icon=":material/forum:")
        return
    for node in tree:
        label = (
            f"{_thread_name(node, markdown=True)} · {_count(len(node['turns']), 'turn')} · "
            f"{node['input_tokens']} in / {node['output_tokens']} out tokens"
        )
        if node["children"]:
            label += f" · {_count(len(node['children']), 'sub-agent')}"
        if node["summaries"]:
            label += " · summarized"
        with st.expander(label, icon=":material/forum:"):
            _thread_body(node)
            for child in node["children"]:
                with st.container(border=True):
                    st.markdown(
                        f":material/subdirectory_arrow_right: **sub-agent** · {md(child['title'])}"
                    )
                    _thread_body(child)
    flat = [n for root in tree for n in (root, *root["children"])]
    titles = {n["id"]: plain(_thread_name(n)) for n in flat}
    picked = st.selectbox(
        "Transcript", list(titles), key="thread_pick", format_func=titles.__getitem__
    )
    if picked:
        messages = data.thread_messages(db, picked)
        if messages:
            st.dataframe(data.frame(messages), hide_index=True)


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


def _thread_body(node: dict[str, Any]) -> None:
    st.caption(
        f"{code(node['id'])} · {md(node['kind'])} · model {md(node['model'] or '?')} · "
        f"{node['messages']} messages ({node['message_tokens']} tokens) · "
        f"started {md(node['created_at'])}"
    )
    for s in node["summaries"]:
        st.info(
            f"**Summary** of messages 1–{md(s['covers_until_seq'])} "
            f"({md(s['tokens'])} tokens, {md(s['created_at'])}):\n\n{md_lines(s['content'])}",
            icon=":material/summarize:",
        )
    if node["turns"]:
        st.dataframe(data.frame(node["turns"]), hide_index=True)


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
        return plain(f"v{v} · {row['reason']} · {row['created_at']} · {row['fact_count']} facts")

    ids = list(by_id)
    c1, c2 = st.columns(2)
    old = c1.selectbox("From", ids, index=min(1, len(ids) - 1), key="ver_from", format_func=label)
    new = c2.selectbox("To", ids, index=0, key="ver_to", format_func=label)
    diff = data.diff_snapshots(data.version_snapshot(db, old), data.version_snapshot(db, new))
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
        st.dataframe(data.frame(listed), hide_index=True)


# -- Status ------------------------------------------------------------------------------------
def status_page(home: Path, db: Any) -> None:
    """Pending folds, last fold, last error and file locations."""
    info = data.status(home, db)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Pending folds", info["pending"])
    c2.metric("Folding now", info["folding_now"])
    c3.metric("Failed folds", info["failed"])
    c4.metric("Awaiting review", info["awaiting_review"])
    fold = info["last_fold"]
    if fold:
        st.markdown(
            f"**Last fold**: v{fold['version']} at {md(fold['at'])} from {code(fold['source'])}"
        )
    else:
        st.markdown("**Last fold**: none yet")
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
        st.dataframe(data.frame(info["queue"]), hide_index=True)
    st.markdown("**Files**")
    st.dataframe(data.frame(info["files"]), hide_index=True)
