"""memory.json: DeerFlow's schema, atomic writes, corruption kept aside, journal recovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from journal_rows import deerflow_memory
from rival import Rival

from deerflow_nb import Memory
from deerflow_nb.memory import MemoryFileError
from deerflow_nb.memory.store import MemoryStore, empty_memory

DEERFLOW_MEMORY = deerflow_memory(
    [
        {
            "id": "fact_1a2b3c4d",
            "content": "Prefers TypeScript for frontends",
            "category": "preference",
            "confidence": 0.9,
            "createdAt": "2025-01-01T00:00:00Z",
            "source": "thread-abc",
        }
    ],
    "2025-01-02T03:04:05.000000Z",
    workContext=("Core contributor to DeerFlow", "2025-01-01Z"),
    topOfMind=("LangGraph agents", "2025-01-01Z"),
    recentMonths=("Built a research agent", "2025-01-01Z"),
)


def test_missing_file_reads_as_the_empty_deerflow_schema(home: Path) -> None:
    data = Memory(home).data
    assert set(data) == {"version", "lastUpdated", "user", "history", "facts"}
    assert data["version"] == "1.0" and data["lastUpdated"].endswith("Z")
    assert set(data["user"]) == {"workContext", "personalContext", "topOfMind"}
    assert set(data["history"]) == {"recentMonths", "earlierContext", "longTermBackground"}
    assert all(s == {"summary": "", "updatedAt": ""} for s in data["user"].values())
    assert data["facts"] == []


def test_a_deerflow_memory_file_is_read_and_imported_unchanged(home: Path, tmp_path: Path) -> None:
    (home / "memory.json").write_text(json.dumps(DEERFLOW_MEMORY))
    assert Memory(home).data == DEERFLOW_MEMORY

    other = tmp_path / "other"
    mem = Memory(other)
    source = tmp_path / "deerflow.json"
    source.write_text(json.dumps(DEERFLOW_MEMORY))
    assert mem.import_(source) == 1
    assert json.loads((other / "memory.json").read_text()) == DEERFLOW_MEMORY
    assert mem.versions()[-1]["reason"] == "import"


def test_written_facts_keep_deerflow_fields(home: Path) -> None:
    mem = Memory(home)
    fact = mem.add_fact("Works at Acme", category="context", confidence=0.95, source="t1")
    on_disk = json.loads((home / "memory.json").read_text())["facts"][0]
    assert on_disk == fact
    assert {"id", "content", "category", "confidence", "createdAt", "source"} <= set(on_disk)
    assert on_disk["id"].startswith("fact_") and len(on_disk["id"]) == 13
    assert on_disk["createdAt"].endswith("Z") and on_disk["source"] == "t1"


def test_write_leaves_no_temp_files_and_replaces_atomically(home: Path) -> None:
    store = MemoryStore(home / "memory.json")
    with store.locked():
        store.write(empty_memory())
        store.write({**empty_memory(), "facts": [{"id": "x", "content": "c"}]})
    assert sorted(p.name for p in home.iterdir()) == ["memory.json", "memory.json.lock"]
    assert store.read()["facts"][0]["id"] == "x"


@pytest.mark.parametrize(
    "payload",
    [
        b'{"facts": [',
        b"[1, 2]",
        b'{"facts": {"a": 1}}',
        b"\xff\xfe",
        b'{"facts": [3]}',
        b'{"facts": [{"content": "x", "confidence": null}]}',
        b'{"facts": [{"content": "x", "confidence": "high"}]}',
        b'{"facts": [{"content": "x", "confidence": NaN}]}',
        b'{"facts": [{"content": "x", "confirmations": "2"}]}',
    ],
)
def test_corrupt_file_is_never_overwritten_and_kept_aside(home: Path, payload: bytes) -> None:
    mem = Memory(home)
    mem.add_fact("Uses DuckDB for local analytics", category="behavior")
    path = home / "memory.json"
    path.write_bytes(payload)
    with pytest.raises(MemoryFileError) as info:
        _ = mem.data
    message = str(info.value)
    assert str(path) in message and "rollback" in message and "\n" not in message
    copies = list(home.glob("memory.json.corrupt-*"))
    assert len(copies) == 1 and copies[0].read_bytes() == payload
    # A change refuses to build on the broken file, and the file stays as it was.
    with pytest.raises(MemoryFileError):
        mem.add_fact("Prefers Vim keybindings", category="preference")
    assert path.read_bytes() == payload
    assert len(list(home.glob("memory.json.corrupt-*"))) == 1  # one copy per bad content

    assert mem.history.recover() == mem.versions()[-2]["id"]
    assert [f["content"] for f in mem.data["facts"]] == ["Uses DuckDB for local analytics"]
    assert copies[0].read_bytes() == payload


def test_a_fact_with_a_non_numeric_confidence_is_named_not_folded_over(home: Path) -> None:
    fact = '{"id": "f1", "content": "Likes tea", "confidence": "high"}'
    (home / "memory.json").write_text(f'{{"facts": [{fact}]}}')
    with pytest.raises(MemoryFileError, match=r"facts\[0\] has confidence 'high', not a number"):
        _ = Memory(home).data
    with pytest.raises(ValueError, match="cannot import, facts"):
        Memory(home / "other").import_(home / "memory.json")


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ('[{"content": "Likes tea"}]', r"facts\[0\] has no 'id'"),
        ('[{"id": "", "content": "Likes tea"}]', r"facts\[0\] has no 'id'"),
        (
            '[{"id": "f1", "content": "Likes tea"}, {"id": "f1", "content": "Uses vim"}]',
            r"facts\[1\] repeats the id 'f1'",
        ),
    ],
)
def test_a_fact_without_a_unique_id_is_named(home: Path, facts: str, expected: str) -> None:
    """Facts are edited and forgotten by id: one without (or sharing one) could be neither."""
    (home / "memory.json").write_text(f'{{"facts": {facts}}}')
    with pytest.raises(MemoryFileError, match=expected):
        _ = Memory(home).data
    with pytest.raises(ValueError, match="cannot import, " + expected):
        Memory(home / "other").import_(home / "memory.json")


def test_recover_restores_the_newest_version_as_it_commits(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``recover`` read the journal's newest version before memory.json's lock: when another
    kernel recovered and added a fact meanwhile, this one restored the version before it,
    and the fact was gone from memory (its version kept only in the history)."""
    mem = Memory(home)
    mem.add_fact("Uses DuckDB for local analytics", category="behavior")
    (home / "memory.json").write_bytes(b"{oops")
    code = 'm.history.recover()\nm.add_fact("Prefers Vim keybindings")\nprint("added")'
    rival = Rival(home, code)
    rival.before(monkeypatch, mem.store, "locked")  # as this kernel goes to recover
    restored = mem.history.recover()
    assert rival.said == ["added"]
    *_, added, recovered = mem.versions()
    assert (restored, recovered["reason"]) == (added["id"], "rollback")
    assert contents(mem) == ["Uses DuckDB for local analytics", "Prefers Vim keybindings"]


def test_recover_without_any_version_says_so(home: Path) -> None:
    (home / "memory.json").write_text("{oops")
    with pytest.raises(LookupError, match="no memory version"):
        Memory(home).history.recover()


def test_deleting_memory_json_resets_and_old_facts_do_not_return(home: Path) -> None:
    mem = Memory(home)
    mem.add_fact("Prefers dark mode", category="preference")
    (home / "memory.json").unlink()
    assert mem.data["facts"] == []
    mem.add_fact("Works on project Apollo")
    assert [f["content"] for f in mem.data["facts"]] == ["Works on project Apollo"]


def contents(mem: Memory) -> list[str]:
    return [f["content"] for f in mem.data["facts"]]


def replace_whole(mem: Memory, how: str, version: int, other: Path) -> None:
    """Replace memory as a whole the way ``how`` says (``recover``: ``fold --rebuild``)."""
    if how == "recover":
        mem.history.recover()
    elif how == "rollback":
        mem.history.rollback(version)
    elif how == "import":
        mem.import_(other)
    else:
        mem.transfer.reset()


WHOLE = ["recover", "rollback", "import", "reset"]


@pytest.mark.parametrize("how", WHOLE)
def test_a_hand_edit_becomes_a_version_before_a_whole_replacement(
    home: Path, tmp_path: Path, how: str
) -> None:
    """A fact added to memory.json with an editor was dropped by a rollback, import, reset
    or ``fold --rebuild`` with no version holding it: now it is one, and comes back."""
    mem = Memory(home)
    mem.add_fact("Uses DuckDB for local analytics", category="behavior")
    first = mem.versions()[-1]["id"]
    mem.add_fact("Prefers Vim keybindings", category="preference")
    path = home / "memory.json"
    data = json.loads(path.read_text())
    data["facts"].append({**data["facts"][0], "id": "fact_byhand1", "content": "Writes French"})
    path.write_text(json.dumps(data, indent=2))
    other = tmp_path / "other.json"
    other.write_text(json.dumps(DEERFLOW_MEMORY))
    replace_whole(mem, how, first, other)
    assert "Writes French" not in contents(mem)
    *_, kept, replaced = mem.versions()
    assert (kept["reason"], kept["source"]) == ("hand edit", "memory.json")
    assert replaced["reason"] == ("rollback" if how == "recover" else how)
    assert mem.history.version(kept["id"]) == data
    added = [e for e in mem.history.events() if e["version_id"] == kept["id"]]
    assert [(e["fact_id"], e["new_content"]) for e in added] == [("fact_byhand1", "Writes French")]
    mem.history.rollback(kept["id"])
    assert contents(mem) == [
        "Uses DuckDB for local analytics",
        "Prefers Vim keybindings",
        "Writes French",
    ]
    assert mem.versions()[-1]["reason"] == "rollback"  # memory.json was the hand edit's


@pytest.mark.parametrize("fresh", [False, True])
@pytest.mark.parametrize("how", WHOLE)
def test_without_a_hand_edit_a_whole_replacement_adds_one_version(
    home: Path, tmp_path: Path, how: str, fresh: bool
) -> None:
    """``fresh``: a new handle (another kernel) rebuilds the newest version to compare."""
    mem = Memory(home)
    mem.add_fact("Uses DuckDB for local analytics", category="behavior")
    first = mem.versions()[-1]["id"]
    for n in range(3):  # versions stored as deltas
        mem.add_fact(f"Prefers tool number {n}", category="preference")
    other = tmp_path / "other.json"
    other.write_text(json.dumps(DEERFLOW_MEMORY))
    reasons = [v["reason"] for v in mem.versions()]
    replace_whole(Memory(home) if fresh else mem, how, first, other)
    after = [v["reason"] for v in Memory(home).versions()]
    assert after == [*reasons, "rollback" if how == "recover" else how]
