"""The journal: append-only named migrations, WAL, and messages that round-trip exactly."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from deerflow_nb.config import HomeError
from deerflow_nb.storage import journal, migrations
from deerflow_nb.storage.journal import Journal
from deerflow_nb.storage.migrations import MIGRATIONS


def test_migrations_are_recorded_in_order_and_run_once(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    first = Journal(path)
    names = [name for name, _ in MIGRATIONS]
    assert first.applied_migrations() == names
    first.close()
    again = Journal(path)  # reopening applies nothing twice (a second run would fail)
    assert again.applied_migrations() == names
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_migration_appended_later_upgrades_an_existing_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.db"
    old = Journal(path)
    old.ensure_thread("t1")
    old.add_message("t1", {"role": "user", "content": "kept across the upgrade"})
    old.close()

    def m999_notes(db: sqlite_utils.Database) -> None:
        db["notes"].create({"id": int, "text": str}, pk="id")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*MIGRATIONS, ("m999_notes", m999_notes)])
    upgraded = Journal(path)
    assert upgraded.applied_migrations()[-1] == "m999_notes"
    assert "notes" in upgraded.db.table_names()
    assert upgraded.messages("t1") == [{"role": "user", "content": "kept across the upgrade"}]


def test_messages_turns_and_summaries_round_trip(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.db")
    j.ensure_thread("lead")
    j.ensure_thread("subagent-1", kind="subagent", parent_id="lead")
    turn = j.start_turn("lead", "offline")
    function = {"name": "list_variables", "arguments": "{}"}
    call = {"id": "c1", "type": "function", "function": function}
    sent = [
        {"role": "user", "content": "what data do I have?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "df: DataFrame", "tool_call_id": "c1"},
        {"role": "assistant", "content": "You have df."},
    ]
    seqs = [j.add_message("lead", m, turn_id=turn) for m in sent]
    j.end_turn(turn, status="ok", input_tokens=12, output_tokens=3, facts_injected=1)
    j.add_summary("lead", covers_until_seq=2, content="The user asked about data.", model="offline")

    assert seqs == [1, 2, 3, 4]
    assert j.messages("lead") == sent
    assert j.messages("lead", after_seq=2) == sent[2:]
    assert j.thread("subagent-1")["parent_id"] == "lead"
    (row,) = j.turns("lead")
    assert (row["status"], row["input_tokens"], row["facts_injected"]) == ("ok", 12, 1)
    assert j.latest_summary("lead")["covers_until_seq"] == 2


def test_a_damaged_journal_is_one_line_naming_the_fix_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    garbage = b"this was never a SQLite database " * 8
    path.write_bytes(garbage)
    with pytest.raises(HomeError) as info:
        Journal(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and "move it aside" in message
    assert path.read_bytes() == garbage


def test_a_turn_interrupted_while_it_is_closed_leaves_no_tool_call_unanswered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rest of a turn goes in with its end, all or nothing: a Ctrl-C in between used to
    leave a tool call without its result, which the API refuses in every later turn."""
    j = Journal(tmp_path / "journal.db")
    j.ensure_thread("t")
    turn = j.start_turn("t", "offline")
    j.add_message("t", {"role": "user", "content": "describe df"}, turn_id=turn)
    call = {"id": "c1", "type": "function", "function": {"name": "describe", "arguments": "{}"}}
    rest = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "df: 3 rows"},
        {"role": "assistant", "content": "It has 3 rows."},
    ]
    real = journal._insert_message
    written: list[dict] = []

    def interrupted_after_one(db: object, thread_id: str, message: dict, turn_id: str) -> int:
        if written:
            raise KeyboardInterrupt
        written.append(message)
        return real(db, thread_id, message, turn_id)

    monkeypatch.setattr(journal, "_insert_message", interrupted_after_one)
    with pytest.raises(KeyboardInterrupt):
        j.end_turn(turn, status="ok", messages=rest)
    assert [m["role"] for m in j.messages("t")] == ["user"]
    assert [t["status"] for t in j.turns("t")] == ["running"]

    monkeypatch.undo()
    j.end_turn(turn, status="ok", messages=rest)
    assert [m["role"] for m in j.messages("t")] == ["user", "assistant", "tool", "assistant"]
    assert [t["status"] for t in j.turns("t")] == ["ok"]


def test_a_turn_begins_journaled_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread, running turn and the user's message go in with one commit; a Ctrl-C while
    the message is written leaves no running turn without its message."""
    j = Journal(tmp_path / "journal.db")
    statements: list[str] = []
    j.db.conn.set_trace_callback(statements.append)
    turn = j.begin_turn("t", {"role": "user", "content": "hello"}, model="offline")
    j.db.conn.set_trace_callback(None)
    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
    assert [t["id"] for t in j.turns("t")] == [turn]
    assert j.messages("t") == [{"role": "user", "content": "hello"}]

    def interrupted(*args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(journal, "_insert_message", interrupted)
    with pytest.raises(KeyboardInterrupt):
        j.begin_turn("u", {"role": "user", "content": "again"}, model="offline")
    assert j.thread("u") is None and j.turns("u") == []
