"""The Threads tab: recall over every conversation, the thread list, one thread's detail.

A thread's detail: its turns, summaries, sub-agents and transcript.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from ...memory import RECALL_K
from .. import actions, data, view_models
from ..data import MemoryReader
from .injection import home_embedder
from .markup import code, count, md, md_lines, plain, table, time_column, when

THREADS_LISTED = 50  # lead threads in the list (newest first), with their sub-agents


@st.cache_data(max_entries=32, show_spinner="Searching the journal…")
def _recall(home: str, query: str, k: int, stamp: tuple[int, ...]) -> tuple[bool, Any]:
    """The recall search once per query and state of the journal (``stamp``), so an
    auto-refresh does not search again until something new is journaled."""
    return actions.run(data.recall, Path(home), query, k, home_embedder(home))


def _journal_stamp(home: Path) -> tuple[int, ...]:
    stamp: list[int] = []
    for name in (data.JOURNAL_FILENAME, data.JOURNAL_FILENAME + "-wal"):
        try:
            st_ = (home / name).stat()
            stamp += [st_.st_mtime_ns, st_.st_size]
        except OSError:
            stamp += [0, 0]
    return tuple(stamp)


def threads_page(home: Path, reader: MemoryReader) -> None:
    """Recall over every conversation on top; below, the threads (sub-agents under their
    parent) beside the one picked: its summary, its turns in words, its transcript."""
    tree = data.thread_tree(reader)
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
        thread_detail(reader, by_id[st.session_state["thread_pick"]])


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
    rows = view_models.recall_rows(results, query)
    if not rows:
        st.info("No message matches this search.", icon=":material/search_off:")
        return
    with st.container(border=True):
        st.caption(f"{count(len(rows), 'result')}, best first")
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
    label = f"{_thread_name(node, markdown=True)} · {count(len(node['turns']), 'turn')}"
    if node["kind"] == "subagent":
        label = f"↳ {label}"
    if node["children"]:
        label += f" · {count(len(node['children']), 'sub-agent')}"
    if node["summaries"]:
        label += " · summarized"
    return label


def _thread_name(node: dict[str, Any], *, markdown: bool = False) -> str:
    """A lead thread by its name (``%%agent -t NAME``) and then its first message; a
    sub-agent by its task. Escaped for Markdown when ``markdown``, else plain text."""
    esc = md if markdown else plain
    first = plain(node["title"], 70)
    if node["kind"] == "subagent":
        return f"sub-agent · {esc(first)} (of {esc(node['parent_id'] or '?')})"
    name = f"**{esc(node['id'])}**" if markdown else esc(node["id"])
    return name if node["title"] == node["id"] else f"{name} · “{esc(first)}”"


def thread_detail(reader: MemoryReader, node: dict[str, Any]) -> None:
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
    turns = data.turn_rows(reader, node)
    if turns:
        st.markdown(f"**{count(len(turns), 'turn')}**")
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
        st.markdown(f"**{count(len(node['children']), 'sub-agent')}** (pick one on the left)")
        for child in node["children"]:
            st.markdown(
                f"- :material/subdirectory_arrow_right: **sub-agent** · {md(child['title'])} · "
                f"{count(len(child['turns']), 'turn')} · {child['input_tokens']} in / "
                f"{child['output_tokens']} out tokens"
            )
    transcript(data.thread_messages(reader, node["id"]))


TRANSCRIPT_MAX = 200  # messages shown at once (the newest)
_AVATARS = {"user": "user", "assistant": "assistant"}


def transcript(messages: list[dict[str, Any]]) -> None:
    """A thread's messages as a conversation, newest last; a tool's result as text in a
    collapsed block (a DataFrame's head keeps its columns)."""
    if not messages:
        return
    st.markdown(f"**Transcript** · {count(len(messages), 'message')}")
    if len(messages) > TRANSCRIPT_MAX:
        st.caption(f"The newest {TRANSCRIPT_MAX} are shown.")
        messages = messages[-TRANSCRIPT_MAX:]
    for m in messages:
        role = m["role"]
        avatar = _AVATARS.get(role, ":material/build:" if role == "tool" else ":material/info:")
        with st.chat_message(_AVATARS.get(role, "ai"), avatar=avatar):
            st.caption(
                f"{md(role)} · #{m['seq']} · {when(m['time'], seconds=True)} · "
                f"{count(m['tokens'], 'token')}"
            )
            if role == "tool":
                with st.expander(f"Tool result ({count(len(m['content']), 'character')})"):
                    st.code(m["content"], language=None, wrap_lines=True)
            elif m["content"]:
                st.markdown(md_lines(m["content"]))
