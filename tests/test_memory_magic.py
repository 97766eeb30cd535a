"""``%memory`` in a real InteractiveShell against a temporary home: output and files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from journal_rows import deerflow_memory, events, memory_json
from magic_lines import run, usage_error

from deerflow_nb.notebook.memory_args import parse_memory_line
from deerflow_nb.notebook.session import get_session
from deerflow_nb.notebook.views.facts import SearchResults
from deerflow_nb.notebook.views.history import DiffView
from deerflow_nb.notebook.views.status import StatusView, SummaryView


def fact_ids(home: Path) -> list[str]:
    path = home / "memory.json"
    return [f["id"] for f in memory_json(home)["facts"]] if path.exists() else []


def add(shell: InteractiveShell, text: str, category: str = "context", conf: float = 0.9) -> str:
    before = set(fact_ids_of(shell))
    run(shell, f'add "{text}" --category {category} --confidence {conf}')
    (new,) = set(fact_ids_of(shell)) - before
    return new


def fact_ids_of(shell: InteractiveShell) -> list[str]:
    return [f["id"] for f in get_session(shell).memory.data["facts"]]


# -- help and the bare magic ------------------------------------------------------------
def test_help_prints_usage_and_returns_nothing(shell: InteractiveShell) -> None:
    with capture_output() as cap:
        assert run(shell, "--help") is None
    assert "usage: %memory" in cap.stdout
    for sub in ("facts", "search", "preview", "forget", "rollback", "approve", "import"):
        assert sub in cap.stdout
    with capture_output() as cap:
        assert run(shell, "forget --help") is None
    assert "usage: %memory forget" in cap.stdout and "--match" in cap.stdout


def test_bare_memory_in_a_terminal_is_a_text_summary(shell: InteractiveShell, home: Path) -> None:
    add(shell, "Works on churn models at a telecom", "context")
    view = run(shell, "")
    assert isinstance(view, SummaryView)
    text = str(view)
    assert "1 fact (context 1)" in text
    for label in ("Work context", "Personal context", "Top of mind", "Long-term background"):
        assert label in text
    with capture_output() as cap:
        shell.run_cell("%memory")
    assert "Memory —" in cap.stdout


# -- facts, add, edit --------------------------------------------------------------------
def test_add_writes_the_fact_and_journals_it(shell: InteractiveShell, home: Path) -> None:
    note = run(shell, "add I prefer polars over pandas --category preference --confidence 0.8")
    (fact,) = memory_json(home)["facts"]
    assert fact["content"] == "I prefer polars over pandas"
    assert (fact["category"], fact["confidence"]) == ("preference", 0.8)
    assert fact["id"] in str(note) and "Added" in str(note)
    assert [(e["kind"], e["fact_id"]) for e in events(home)] == [("add", fact["id"])]


def test_add_says_when_it_reinforced_or_shortened(shell: InteractiveShell, home: Path) -> None:
    run(shell, "add I prefer polars over pandas --category preference --confidence 0.8")
    note = str(run(shell, "add I prefer polars over pandas"))
    assert note.startswith("Reinforced the near-duplicate") and "%memory edit" in note
    assert len(memory_json(home)["facts"]) == 1
    note = str(run(shell, "add Likes " + "tea " * 300))
    assert note.startswith("Added") and "shortened to 500 characters" in note
    assert "shortened" not in str(run(shell, "add Works on churn models"))


def test_facts_table_filters_and_sorts(shell: InteractiveShell, home: Path) -> None:
    a = add(shell, "Prefers polars over pandas", "preference", 0.95)
    b = add(shell, "Works on churn models", "context", 0.75)
    c = add(shell, "Wants to learn Rust", "goal", 0.85)
    table = run(shell, "facts")
    text = str(table)
    assert "Facts (3)" in text
    assert text.index(a) < text.index(c) < text.index(b)  # by confidence, highest first
    assert "█" in text and "0.95" in text
    md = table._repr_markdown_()
    assert md.count("\n|") >= 4 and "Prefers polars over pandas" in md
    assert "<table>" in table._repr_html_()
    only_goal = str(run(shell, "facts --category goal"))
    assert c in only_goal and a not in only_goal and b not in only_goal
    confident = str(run(shell, "facts --min-confidence 0.8"))
    assert a in confident and c in confident and b not in confident
    by_created = str(run(shell, "facts --sort created"))
    order = [x for _, x in sorted((by_created.index(x), x) for x in (a, b, c))]
    assert order in ([a, b, c], [c, b, a])  # creation order, whichever direction


def test_edit_changes_text_in_file_and_journal(shell: InteractiveShell, home: Path) -> None:
    fid = add(shell, "Uses pandas 1.5", "knowledge")
    note = run(shell, f"edit {fid} Uses pandas 2.2 with pyarrow")
    (fact,) = memory_json(home)["facts"]
    assert fact["id"] == fid and fact["content"] == "Uses pandas 2.2 with pyarrow"
    assert "Edited" in str(note)
    last = events(home)[-1]
    assert last["fact_id"] == fid and last["new_content"] == "Uses pandas 2.2 with pyarrow"
    assert last["old_content"] == "Uses pandas 1.5"


# -- search and preview -----------------------------------------------------------------
def test_search_ranks_with_scores(shell: InteractiveShell) -> None:
    add(shell, "Prefers polars over pandas for dataframes", "preference")
    add(shell, "Lives in Lisbon", "context")
    add(shell, "Studies Bayesian statistics", "knowledge")
    view = run(shell, "search polars dataframes -k 2")
    assert isinstance(view, SearchResults)
    assert len(view.results) <= 2
    top, score = view.results[0]
    assert "polars" in top["content"]
    assert f"{score:.3f}" in str(view)


def test_preview_is_the_injected_block_within_budget(shell: InteractiveShell) -> None:
    for i in range(30):
        add(shell, f"Project {i} uses a feature store named store{i} with daily refresh jobs")
    memory, here = get_session(shell).memory, get_session(shell).project.name
    view = run(shell, "preview --context 'feature store' --tokens 120")
    assert view.block == memory.preview("feature store", max_tokens=120, project=here)
    assert 0 < view.tokens <= 120
    assert f"{view.tokens} / 120 tokens" in str(view)
    assert view.block in str(view)
    default = run(shell, "preview")
    assert default.budget == memory.settings.memory.max_injection_tokens


# -- forget --------------------------------------------------------------------------------
def test_forget_by_id_removes_and_journals(shell: InteractiveShell, home: Path) -> None:
    a = add(shell, "Prefers tabs")
    b = add(shell, "Prefers dark mode")
    note = run(shell, f"forget {a}")
    assert fact_ids(home) == [b]
    assert "Forgot 1 fact" in str(note) and "Prefers tabs" in str(note)
    assert ("remove", a) in [(e["kind"], e["fact_id"]) for e in events(home)]


def test_forget_with_an_unknown_id_removes_nothing(shell: InteractiveShell, home: Path) -> None:
    a = add(shell, "Prefers tabs")
    before_file, before_events = memory_json(home), events(home)
    line = usage_error(shell, f"forget {a} fact_nope")
    assert "no fact 'fact_nope'; see %memory facts" in line
    assert memory_json(home) == before_file
    assert events(home) == before_events


def test_forget_match_asks_for_yes_when_several_match(shell: InteractiveShell, home: Path) -> None:
    a = add(shell, "Uses polars for ETL")
    b = add(shell, "Uses polars lazy frames")
    c = add(shell, "Lives in Lisbon")
    with capture_output() as cap:
        result = shell.run_cell("%memory forget --match polars")
    assert isinstance(result.error_in_exec, UsageError)
    assert "2 facts match 'polars'; add --yes" in cap.stderr
    shown = "".join(o.data.get("text/plain", "") for o in cap.outputs)
    assert a in shown and b in shown and c not in shown  # what matched is shown
    assert sorted(fact_ids(home)) == sorted([a, b, c])
    run(shell, "forget --match polars --yes")
    assert fact_ids(home) == [c]
    run(shell, "forget --match lisbon")  # one match: no --yes needed
    assert fact_ids(home) == []
    assert "no fact matches 'rust'" in usage_error(shell, "forget --match rust")


# -- flush and status ----------------------------------------------------------------------
def test_flush_folds_a_journaled_thread(shell: InteractiveShell, home: Path) -> None:
    memory = get_session(shell).memory
    memory.journal.ensure_thread("t-flush")
    memory.journal.add_message("t-flush", {"role": "user", "content": "I prefer vim over emacs."})
    memory.journal.add_message("t-flush", {"role": "assistant", "content": "Noted."})
    assert memory.enqueue("t-flush")
    note = run(shell, "flush")
    assert "Flushed" in str(note)
    contents = [f["content"].lower() for f in memory_json(home)["facts"]]
    assert any("vim" in c for c in contents), contents
    assert any(e["kind"] == "add" and e["source"] == "t-flush" for e in events(home))


def test_status_shows_paths(shell: InteractiveShell, home: Path) -> None:
    view = run(shell, "status")
    assert isinstance(view, StatusView)
    text = str(view)
    assert str(home / "memory.json") in text and str(home / "journal.db") in text


# -- history, versions, diff, rollback -----------------------------------------------------
def test_history_versions_diff_rollback(shell: InteractiveShell, home: Path) -> None:
    a = add(shell, "Prefers polars", "preference")
    b = add(shell, "Works on churn models")
    run(shell, f"forget {a}")
    history = str(run(shell, "history"))
    assert history.index("remove") < history.index("add")  # newest first
    one = run(shell, f"history {a}")
    assert [e["kind"] for e in one.events] == ["add", "remove"]  # one fact's story, in order
    assert b not in str(one)

    versions = run(shell, "versions").versions
    assert len(versions) >= 3
    ids = sorted(v["id"] for v in versions)
    first = next(v["id"] for v in versions if v["fact_count"] == 1 and v["reason"] == "add")
    diff = run(shell, f"diff {first} {ids[-1]}")
    assert isinstance(diff, DiffView)
    rows = {(r[0], r[1]) for r in diff.table().rows}
    assert rows == {("added", b), ("removed", a)}, str(diff)
    assert "Works on churn models" in str(diff) and "Prefers polars" in str(diff)

    note = run(shell, f"rollback {first}")
    assert "Rolled back" in str(note)
    assert fact_ids(home) == [a]
    assert any(e["kind"] == "rollback" for e in events(home))
    assert "no version 999; see %memory versions" in usage_error(shell, "rollback 999")
    assert "no version 999" in usage_error(shell, "diff 1 999")


# -- review ------------------------------------------------------------------------------
def diff_adding(content: str) -> dict[str, Any]:
    return {
        "user": {},
        "history": {},
        "newFacts": [{"content": content, "category": "preference", "confidence": 0.9}],
        "factsToRemove": [],
    }


def test_review_pending_approve_reject(shell: InteractiveShell, home: Path) -> None:
    memory = get_session(shell).memory
    assert "Review mode on" in str(run(shell, "review on"))
    assert memory.review.enabled is True
    memory.apply(diff_adding("Prefers uv over pip"), source="t-1")
    memory.apply(diff_adding("Prefers ruff over flake8"), source="t-2")
    assert fact_ids(home) == []  # nothing applied while waiting for review
    pending = run(shell, "pending")
    assert len(pending.pending) == 2 and "Prefers uv over pip" in str(pending)
    first, second = (p["id"] for p in sorted(pending.pending, key=lambda p: p["id"]))
    assert "no pending change 99" in usage_error(shell, "approve 99")
    assert fact_ids(home) == []
    run(shell, f"approve {first}")
    assert [f["content"] for f in memory_json(home)["facts"]] == ["Prefers uv over pip"]
    run(shell, f"reject {second}")
    assert [f["content"] for f in memory_json(home)["facts"]] == ["Prefers uv over pip"]
    assert run(shell, "pending").pending == ()
    run(shell, "review off")
    assert memory.review.enabled is False
    memory.apply(diff_adding("Prefers httpx"), source="t-3")
    assert len(memory_json(home)["facts"]) == 2


def test_approve_all(shell: InteractiveShell, home: Path) -> None:
    memory = get_session(shell).memory
    run(shell, "review on")
    memory.apply(diff_adding("Prefers uv"), source="t-1")
    memory.apply(diff_adding("Prefers ruff"), source="t-2")
    assert "Approved 2" in str(run(shell, "approve --all"))
    assert sorted(f["content"] for f in memory_json(home)["facts"]) == [
        "Prefers ruff",
        "Prefers uv",
    ]
    assert "give pending ids or --all" in usage_error(shell, "reject")


# -- export, import, reset ---------------------------------------------------------------
def test_export_reset_import_round_trip(
    shell: InteractiveShell, home: Path, tmp_path: Path
) -> None:
    a = add(shell, "Prefers polars", "preference")
    out = tmp_path / "backup.json"
    note = run(shell, f"export {out}")
    assert str(out) in str(note)
    assert json.loads(out.read_text())["facts"][0]["id"] == a

    assert "run %memory reset --yes" in usage_error(shell, "reset")
    assert fact_ids(home) == [a]
    run(shell, "reset --yes")
    assert fact_ids(home) == []

    assert "Imported 1 fact from" in str(run(shell, f"import {out}"))  # memory was empty
    assert fact_ids(home) == [a]
    empty = tmp_path / "empty.json"
    empty.write_text('{"facts": []}')
    assert "replaces the 1 fact in memory" in usage_error(shell, f"import {empty}")
    assert fact_ids(home) == [a]
    assert "Imported 0 facts" in str(run(shell, f"import {empty} --yes"))
    assert fact_ids(home) == []
    run(shell, f"import {out}")
    kinds = {e["kind"] for e in events(home)}
    assert {"add", "reset", "import"} <= kinds


def test_export_never_overwrites_by_accident(
    shell: InteractiveShell, home: Path, tmp_path: Path
) -> None:
    add(shell, "Prefers polars", "preference")
    journal = (home / "journal.db").read_bytes()
    # with the files that go with them: the journal's write-ahead log is the journal
    for name in ("journal.db", "memory.json", "journal.db-wal", "journal.db-shm", "config.yaml"):
        assert "this memory's own file" in usage_error(shell, f"export {home / name} --force")
    assert (home / "journal.db").read_bytes() == journal
    assert "is a folder" in usage_error(shell, f"export {tmp_path}")
    assert "cannot write" in usage_error(shell, f"export {tmp_path / 'no' / 'such' / 'x.json'}")
    out = tmp_path / "mine.json"
    out.write_text("my notes")
    assert "exists; choose another path" in usage_error(shell, f"export {out}")
    assert out.read_text() == "my notes"
    assert "Exported 1 fact to" in str(run(shell, f"export {out} --force"))
    assert json.loads(out.read_text())["facts"][0]["content"] == "Prefers polars"


def test_import_accepts_a_deerflow_memory_json(
    shell: InteractiveShell, home: Path, tmp_path: Path
) -> None:
    deerflow = deerflow_memory(
        [
            {
                "id": "fact_deer0001",
                "content": "Uses LangGraph",
                "category": "knowledge",
                "confidence": 0.85,
                "createdAt": "2025-01-01T00:00:00Z",
                "source": "thread-1",
            }
        ],
        "2025-01-01T00:00:00Z",
        workContext=("ML engineer at a bank", "2025-01-01"),
    )
    path = tmp_path / "deerflow_memory.json"
    path.write_text(json.dumps(deerflow))
    run(shell, f"import {path}")
    data = memory_json(home)
    assert data["facts"][0]["id"] == "fact_deer0001"
    assert data["user"]["workContext"]["summary"] == "ML engineer at a bank"
    assert "Work context: ML engineer at a bank" in str(run(shell, ""))


def test_import_of_a_broken_file_changes_nothing(
    shell: InteractiveShell, home: Path, tmp_path: Path
) -> None:
    a = add(shell, "Prefers polars")
    before = memory_json(home)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "cannot import" in usage_error(shell, f"import {bad}")
    assert "no file" in usage_error(shell, f"import {tmp_path / 'missing.json'}")
    assert memory_json(home) == before and fact_ids(home) == [a]


# -- usage errors ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("foo", "unknown subcommand 'foo'; run %memory --help"),
        ("add x --confidence 1.5", "--confidence: must be a number from 0 to 1, got '1.5'"),
        ("search x -k zero", "-k: must be a whole number of at least 1, got 'zero'"),
        ("preview --tokens -3", "--tokens: must be a whole number of at least 1, got '-3'"),
        ("facts --min-confidence high", "--min-confidence: must be a number from 0 to 1"),
        ("facts --category nope", "invalid choice: 'nope'"),
        ("facts --bogus", "%memory facts: unrecognized arguments: --bogus"),
        ("edit fact_nope new text", "no fact 'fact_nope'; see %memory facts"),
        ('edit fact_nope "  "', "the new text is empty; give some words, or forget the fact"),
        ("forget fact_nope", "no fact 'fact_nope'; see %memory facts"),
        ("history fact_nope", "no fact 'fact_nope'; see %memory facts"),
        ("forget", "give fact ids or --match TEXT"),
        ("rollback first", "must be a whole number"),
        ("review maybe", "invalid choice: 'maybe'"),
        ("approve", "give pending ids or --all"),
        ("reset", "run %memory reset --yes to confirm"),
    ],
)
def test_usage_errors_are_one_line_and_write_nothing(
    shell: InteractiveShell, home: Path, line: str, expected: str
) -> None:
    run(shell, "add Keeps notes in Obsidian")
    before_file, before_events = memory_json(home), events(home)
    message = usage_error(shell, line)
    assert message.startswith("UsageError: ") and expected in message, message
    assert memory_json(home) == before_file
    assert events(home) == before_events


def test_text_keeps_its_backslashes_and_a_leading_dash_is_told_how() -> None:
    """Found by a review: shell-style splitting dropped backslashes (a Windows path was
    stored as ``C:datarawchurn.csv``), and a word like ``-O2`` failed with no fix named."""
    args = parse_memory_line(r'add Reads C:\data\raw\churn.csv and "the \d+ pattern"')
    assert args.text == r"Reads C:\data\raw\churn.csv and the \d+ pattern"
    assert parse_memory_line("add Uses C# daily").text == "Uses C# daily"
    with pytest.raises(UsageError, match="starts with -: put -- before the text"):
        parse_memory_line("add Compiles with -O2 always")
    assert parse_memory_line("add -- Compiles with -O2 always").text == "Compiles with -O2 always"
    with pytest.raises(UsageError, match='unbalanced quote; close the "'):
        parse_memory_line('add "never closed')


def test_an_empty_match_and_a_huge_limit_are_handled(shell: InteractiveShell, home: Path) -> None:
    """Found by a review: ``forget --match ''`` matched every fact; ``history --limit`` past
    64 bits was a database error."""
    add(shell, "Prefers polars", "preference")
    assert "give the text to match" in usage_error(shell, "forget --match '' --yes")
    assert len(memory_json(home)["facts"]) == 1
    assert run(shell, "history --limit 99999999999999999999") is not None


def test_item_numbers_are_bounded_before_they_are_listed() -> None:
    """Found by a review: ``--only 1-999999999`` listed every number first (out of memory)."""
    assert parse_memory_line("approve 3 --only 1-3,2-5,1").only == (1, 2, 3, 4, 5)
    with pytest.raises(UsageError, match="at most 100,000"):
        parse_memory_line("approve 3 --only 1-999999999")


def test_parsing_gives_typed_frozen_args() -> None:
    args = parse_memory_line("add I'm on the data team --category context --confidence 0.7")
    assert type(args).__name__ == "AddArgs"
    assert (args.text, args.category, args.confidence) == ("I'm on the data team", "context", 0.7)
    with pytest.raises(AttributeError):
        args.text = "x"  # type: ignore[misc]
    forget = parse_memory_line("forget a b --yes")
    assert (forget.ids, forget.match, forget.yes) == (("a", "b"), None, True)
    assert parse_memory_line("approve --all").all is True
    assert parse_memory_line("preview").tokens is None
    assert parse_memory_line("").command == "panel"


def test_ids_and_urls_expand_from_the_notebook_but_text_does_not() -> None:
    names = {"fid": "fact_abc", "url": "postgresql://alice@db.example.org/team", "n": 3}
    assert parse_memory_line("forget {fid}", names).ids == ("fact_abc",)
    join = parse_memory_line("join churn --url {url}", names)
    assert (join.name, join.url) == ("churn", names["url"])
    assert parse_memory_line("share churn --url $url", names).url == names["url"]
    assert parse_memory_line("join churn --url {missing}", names).url == "{missing}"
    assert parse_memory_line("add {fid} costs $n", names).text == "{fid} costs $n"


def test_dollar_and_braces_are_kept_literally(shell: InteractiveShell, home: Path) -> None:
    shell.user_ns["budget"] = 5
    run(shell, "add Pays $budget for {budget} seats")
    assert memory_json(home)["facts"][0]["content"] == "Pays $budget for {budget} seats"


def test_text_subcommands_do_not_import_widgets_or_model_sdks(home: Path) -> None:
    """ipywidgets loads only when a panel is built; openai and streamlit never for %memory."""
    script = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "from deerflow_nb.notebook.memory_magic import MemoryMagics\n"
        "ip = InteractiveShell.instance()\n"
        "ip.register_magics(MemoryMagics(ip))\n"
        "for line in ('add Likes tea', 'facts', '', 'history', 'status', 'versions'):\n"
        "    ip.run_line_magic('memory', line)\n"
        "print(sorted(m for m in ('ipywidgets', 'openai', 'streamlit') if m in sys.modules))\n"
        "ip.run_line_magic('memory', 'panel')\n"
        "print('ipywidgets' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split("\n")
    assert out[:2] == ["[]", "True"], out


def test_a_damaged_memory_json_is_one_line_naming_the_recovery(
    shell: InteractiveShell, home: Path
) -> None:
    run(shell, "add Prefers polars over pandas --category preference")
    (home / "memory.json").write_text("{broken", encoding="utf-8")
    for line in ("facts", "search polars", "preview", ""):
        with pytest.raises(UsageError) as info:
            run(shell, line)
        message = str(info.value)
        assert "\n" not in message
        assert "memory.json" in message and "rollback" in message
    assert (home / "memory.json").read_text(encoding="utf-8") == "{broken"
    run(shell, "rollback 1")
    assert "polars" in memory_json(home)["facts"][0]["content"]


def test_a_config_typo_is_one_line_naming_key_and_file(shell: InteractiveShell, home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  debounce_secondz: 3\n", encoding="utf-8")
    with pytest.raises(UsageError) as info:
        run(shell, "facts")
    message = str(info.value)
    assert "\n" not in message
    assert "memory.debounce_secondz" in message and str(home / "config.yaml") in message


def test_a_damaged_journal_or_a_home_that_is_not_a_folder_is_one_line(
    shell: InteractiveShell, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    garbage = b"this was never a SQLite database " * 8
    (home / "journal.db").write_bytes(garbage)
    line = usage_error(shell, "facts")
    assert str(home / "journal.db") in line and "move it aside" in line
    with capture_output():
        result = shell.run_cell("%%agent\nhello")
    assert isinstance(result.error_in_exec, UsageError)
    assert "move it aside" in str(result.error_in_exec)
    assert (home / "journal.db").read_bytes() == garbage

    monkeypatch.setenv("DEERFLOW_NB_HOME", "/proc/no-such-home")  # cannot be created
    line = usage_error(shell, "status")
    assert "cannot create the deerflow_nb home /proc/no-such-home" in line

    not_a_folder = tmp_path / "home.txt"
    not_a_folder.write_text("notes")
    monkeypatch.setenv("DEERFLOW_NB_HOME", str(not_a_folder))
    line = usage_error(shell, "status")
    assert "is a file, not a folder" in line and "DEERFLOW_NB_HOME" in line


def test_an_add_that_would_be_evicted_at_once_is_refused(
    shell: InteractiveShell, home: Path
) -> None:
    (home / "config.yaml").write_text("memory:\n  max_facts: 1\n", encoding="utf-8")
    run(shell, "add Keeps notes in Obsidian --confidence 0.9")
    line = usage_error(shell, "add Uses vim --confidence 0.5")
    assert "memory is full (memory.max_facts is 1)" in line, line
    assert [f["content"] for f in memory_json(home)["facts"]] == ["Keeps notes in Obsidian"]


def test_ids_and_versions_expand_notebook_variables(shell: InteractiveShell, home: Path) -> None:
    """``%memory edit {fid} …`` as a data scientist writes it; the text stays literal."""
    run(shell, "add Works at Orange")
    fid = memory_json(home)["facts"][0]["id"]
    shell.user_ns.update(fid=fid, ids=[fid], company="SFR")
    result = shell.run_cell("%memory edit {fid} Works at {company} for $5")
    assert result.success, result.error_in_exec
    assert memory_json(home)["facts"][0]["content"] == "Works at {company} for $5"
    assert shell.run_cell("%memory history $fid").success
    shell.user_ns["v"] = 1
    assert shell.run_cell("%memory diff {v}").success
    assert shell.run_cell("%memory forget {ids[0]}").success
    assert memory_json(home)["facts"] == []


def test_an_id_variable_that_does_not_exist_is_named_in_the_error(
    shell: InteractiveShell, home: Path
) -> None:
    run(shell, "add Works at Orange")
    with pytest.raises(UsageError, match=r"no fact '\{nope\}': no notebook variable"):
        run(shell, "edit {nope} Works at SFR")


def test_both_magics_say_a_fixable_error_the_same_way(shell: InteractiveShell, home: Path) -> None:
    """One path (``notebook/errors.py``) for ``%memory`` and ``%%agent``: a bad argument or
    a config.yaml typo is one line, and a key typed into the line is not echoed."""
    key = "sk-" + "a1b2c3d4e5" * 3
    line = usage_error(shell, f"facts --bogus {key}")
    assert "unrecognized arguments" in line and key not in line and "[redacted]" in line
    with capture_output() as cap:
        result = shell.run_cell(f"%%agent --bogus {key}\nhello")
    assert isinstance(result.error_in_exec, UsageError) and key not in cap.stderr
    (home / "config.yaml").write_text("memory:\n  debounce_secondz: 3\n", encoding="utf-8")
    for cell in ("%memory facts", "%%agent\nhello"):
        with capture_output() as cap:
            result = shell.run_cell(cell)
        assert isinstance(result.error_in_exec, UsageError), cell
        (message,) = [ln for ln in cap.stderr.splitlines() if ln.strip()]
        assert "memory.debounce_secondz" in message and str(home / "config.yaml") in message


def test_a_fixable_error_becomes_one_redacted_line() -> None:
    from deerflow_nb.memory.store import MemoryFileError
    from deerflow_nb.notebook.errors import fixable_errors, usage_error

    key = "sk-" + "f0e1d2c3b4" * 3
    assert str(usage_error(f"cannot reach the server\n  with key {key}")) == (
        "cannot reach the server with key [redacted]"
    )
    damaged = r"^memory.json is damaged; run %memory rollback$"
    with pytest.raises(UsageError, match=damaged), fixable_errors():
        raise MemoryFileError("memory.json is damaged;\nrun %memory rollback")
    with pytest.raises(KeyError), fixable_errors():  # not the user's to fix: passes as it is
        raise KeyError("fact_x")


def test_a_module_still_being_imported_does_not_break_the_error_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by a review: while the warm-up thread imported ``agent.core``, an error in a
    cell met a module without ``ThreadError`` yet, and showed an AttributeError instead."""
    import types

    from deerflow_nb.config import HomeError
    from deerflow_nb.notebook.errors import fixable

    monkeypatch.setitem(sys.modules, "deerflow_nb.agent.core", types.ModuleType("half"))
    assert fixable(HomeError("the home is a file; name a folder"))
    assert not fixable(KeyError("x"))
