"""The journal never loses a turn to its content (issue 17.7).

A lone surrogate (``\\ud800``: what JSON's ``"\\ud800"`` escape decodes to) in a model
reply, a tool result or a user message used to raise ``UnicodeEncodeError`` in SQLite:
the turn row stayed ``running`` and the thread was never queued. Now such code points
are stored as U+FFFD and everything else is kept as it was.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from loopback import ServerHandle

from deerflow_nb import Agent, Memory
from deerflow_nb.config import load_settings
from deerflow_nb.llm.base import ChatModel, ChatResult, ToolCall, Usage
from deerflow_nb.scrub import encodable, encodable_deep
from deerflow_nb.storage.journal import Journal

LONE = "\ud800"


def journal_rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(home / "journal.db") as conn:
        return conn.execute(sql).fetchall()


def test_encodable_keeps_text_and_pairs_and_replaces_lone_surrogates() -> None:
    assert encodable("plain ünïcödé 北京 😀") == "plain ünïcödé 北京 😀"
    assert encodable(f"a{LONE}b\udfffc") == "a\ufffdb\ufffdc"
    assert encodable("\ud83d\ude00") == "😀"  # a pair spelled as two code units
    message = {"role": "user", "content": "ok", "tool_calls": [{"x": f"{LONE}"}]}
    assert encodable_deep(message)["tool_calls"][0]["x"] == "\ufffd"
    clean = {"role": "user", "content": "ok"}
    assert encodable_deep(clean) is clean


def test_a_streamed_reply_with_a_lone_surrogate_is_journaled_ok_and_queued(
    home: Path, model_server: ServerHandle
) -> None:
    """Over real HTTP: the server's JSON says ``"\\ud800"``, the SDK decodes it."""
    model_server.reply_next(f"Here you go {LONE} and a pair \ud83d\ude00 done.")
    agent = Agent(settings=load_settings(home))
    seen: list[str] = []
    reply = agent.run(f"I prefer polars {LONE} over pandas.", thread="s", on_text=seen.append)
    assert reply == "Here you go \ufffd and a pair 😀 done."
    assert agent.last_turn is not None and agent.last_turn.status == "ok"
    ((status, error),) = journal_rows(home, "SELECT status, error FROM turns")
    assert (status, error) == ("ok", None)
    contents = [r[0] for r in journal_rows(home, "SELECT content FROM messages ORDER BY seq")]
    assert contents == ["I prefer polars \ufffd over pandas.", reply]
    assert journal_rows(home, "SELECT thread_id FROM memory_queue") == [("s",)]
    report = agent.memory.flush()
    assert report.folded == ["s"] and not report.failed
    assert any("polars" in f["content"] for f in agent.memory.facts.list())
    agent.close()


class SurrogateModel(ChatModel):
    """A model that answers with raw lone surrogates, as a decoded JSON reply can: first a
    tool call whose arguments hold one, then a reply holding one."""

    name = "surrogate"

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_mode: bool = False,
        on_text: Any = None,
    ) -> ChatResult:
        if messages[-1]["role"] == "user" and tools:
            arguments = json.dumps({"name": "s", "why": LONE}, ensure_ascii=False)
            call = ToolCall("call_1", "describe_variable", arguments)
            return ChatResult("", [call], Usage(10, 5), self.name, "tool_calls")
        text = f"The variable says {LONE}, and so do I {LONE}."
        if on_text is not None:
            on_text(text)
        return ChatResult(text, [], Usage(20, 8), self.name, "stop")


def test_a_tool_result_and_reply_with_lone_surrogates_lose_nothing(home: Path) -> None:
    """Through the journal alone (no client in between to clean the text)."""
    agent = Agent(
        settings=load_settings(home), model=SurrogateModel(), namespace={"s": f"bad {LONE} text"}
    )
    reply = agent.run(f"Describe s {LONE}", thread="t")
    assert agent.last_turn is not None and agent.last_turn.status == "ok", agent.last_turn
    assert LONE in reply  # the cell shows what the model said; the journal stores it encodable
    ((status,),) = journal_rows(home, "SELECT status FROM turns")
    assert status == "ok"
    rows = journal_rows(home, "SELECT role, content FROM messages ORDER BY seq")
    assert [r[0] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[0][1] == "Describe s \ufffd"
    assert "bad" in rows[2][1]  # the tool shows the value's repr
    (calls,) = journal_rows(
        home, "SELECT tool_calls FROM messages WHERE role = 'assistant' AND tool_calls IS NOT NULL"
    )
    assert json.loads(json.loads(calls[0])[0]["function"]["arguments"])["why"] == "\ufffd"
    assert rows[3][1] == "The variable says \ufffd, and so do I \ufffd."
    assert journal_rows(home, "SELECT thread_id FROM memory_queue") == [("t",)]
    agent.close()


def test_thread_titles_errors_and_summaries_are_stored_encodable(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    journal.ensure_thread("x", title=f"title {LONE}")
    turn = journal.start_turn("x", "m")
    journal.end_turn(turn, status="error", error=f"boom {LONE}")
    journal.add_summary("x", 0, f"summary {LONE}", model="m")
    assert journal.thread("x")["title"] == "title \ufffd"
    assert journal.turns("x")[0]["error"] == "boom \ufffd"
    assert journal.latest_summary("x")["content"] == "summary \ufffd"
    journal.close()


def test_a_fact_with_a_lone_surrogate_is_written_and_versioned(home: Path) -> None:
    memory = Memory(home)
    memory.apply({"newFacts": [{"content": f"Likes {LONE} tea", "confidence": 0.9}]}, "t")
    (fact,) = memory.facts.list()
    assert fact["content"] == "Likes \ufffd tea"
    json.loads((home / "memory.json").read_text(encoding="utf-8"))
    assert (
        memory.history.version(memory.versions()[-1]["id"])["facts"][0]["content"]
        == "Likes \ufffd tea"
    )
    memory.close()
