"""``deerflow-nb`` memory chores, run as a user would: a real subprocess per command."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from journal_rows import journal_turn

from deerflow_nb import Agent, Memory


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deerflow_nb.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fold_folds_what_a_turn_left_queued(home: Path) -> None:
    agent = Agent()
    agent.run("I prefer polars over pandas for dataframes.", thread="t")
    agent.memory.close()
    assert not (home / "memory.json").exists()  # the 30 s debounce has not passed

    result = cli("fold", "--home", str(home))
    assert result.returncode == 0, result.stderr
    assert "folded 1" in result.stdout
    facts = json.loads((home / "memory.json").read_text())["facts"]
    assert any("polars" in f["content"] for f in facts)


def test_export_import_and_status_round_trip(home: Path, tmp_path: Path) -> None:
    mem = Memory(home)
    mem.add_fact("Works on a churn model", category="context")
    mem.close()
    out = tmp_path / "exported.json"
    assert cli("export", str(out), "--home", str(home)).returncode == 0
    again = cli("export", str(out), "--home", str(home))
    assert again.returncode == 2 and "exists" in again.stderr and "Traceback" not in again.stderr
    assert cli("export", str(out), "--force", "--home", str(home)).returncode == 0
    other = tmp_path / "other-home"
    result = cli("import", str(out), "--home", str(other))
    assert result.returncode == 0, result.stderr
    status = json.loads(cli("status", "--json", "--home", str(other)).stdout)
    assert status["fact_count"] == 1

    empty = tmp_path / "empty.json"
    empty.write_text('{"facts": []}')
    refused = cli("import", str(empty), "--home", str(other))
    assert refused.returncode == 2 and "replaces the 1 fact in" in refused.stderr
    assert "--yes" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert json.loads(cli("status", "--json", "--home", str(other)).stdout)["fact_count"] == 1
    assert cli("import", str(empty), "--yes", "--home", str(other)).returncode == 0
    assert json.loads(cli("status", "--json", "--home", str(other)).stdout)["fact_count"] == 0


def test_a_bad_import_path_is_one_line_and_exit_2(home: Path) -> None:
    result = cli("import", str(home / "missing.json"), "--home", str(home))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "missing.json" in result.stderr


def test_a_mistyped_home_is_not_created(tmp_path: Path) -> None:
    typo = tmp_path / "typo-home"
    for command in (("status",), ("fold",), ("export", str(tmp_path / "x.json"))):
        result = cli(*command, "--home", str(typo))
        assert result.returncode == 2 and "no home folder" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert not typo.exists()


def test_fold_exits_1_when_a_thread_failed(home: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (home / "config.yaml").write_text(
        f"model:\n  base_url: http://127.0.0.1:{port}/v1\n  api_key: sk-test\n  max_retries: 0\n"
    )
    mem = Memory(home)
    journal_turn(mem, "t", "I prefer vim over emacs.")
    mem.enqueue("t")
    mem.close()
    result = cli("fold", "--home", str(home), "--timeout", "60")
    assert result.returncode == 1 and "failed 1" in result.stdout
    assert "cannot reach" in result.stdout and "Traceback" not in result.stderr


def test_a_damaged_journal_is_one_line_and_exit_2(home: Path) -> None:
    (home / "journal.db").write_bytes(b"this was never a SQLite database " * 8)
    result = cli("status", "--home", str(home))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "journal.db is not a readable journal" in line and "move it aside" in line


def test_inspect_refuses_a_home_that_is_a_file(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("x")
    result = cli("inspect", "--home", str(not_a_folder))
    assert result.returncode == 2
    assert "is a file, not a folder" in result.stderr.splitlines()[-1]


def test_status_is_readable_text_and_json_on_request(home: Path) -> None:
    mem = Memory(home)
    mem.add_fact("Works on a churn model", category="context")
    mem.close()
    text = cli("status", "--home", str(home))
    assert text.returncode == 0 and "Memory status" in text.stdout
    assert "fact_count" in text.stdout and not text.stdout.lstrip().startswith("{")
    assert json.loads(cli("status", "--json", "--home", str(home)).stdout)["fact_count"] == 1


def test_a_negative_or_unreadable_timeout_is_refused(home: Path) -> None:
    """Found by a review: ``fold --timeout -1`` was taken."""
    for bad in ("-1", "nan", "soon"):
        result = cli("fold", "--home", str(home), "--timeout", bad)
        assert result.returncode == 2 and "a number of seconds, 0 or more" in result.stderr


def test_a_password_with_an_unencoded_slash_or_at_is_never_printed(home: Path) -> None:
    """Found by a review: libpq read part of such a password as the host or database,
    which the error then named."""
    for secret in ("Pw/Secret1", "Pw@Secret1"):
        url = f"postgresql://alice:{secret}@127.0.0.1:1/team"
        for args in (("team", "init", url), ("share", "churn", "--url", url)):
            result = cli(*args, "--home", str(home)) if args[0] == "share" else cli(*args)
            assert result.returncode != 0
            (line,) = result.stderr.splitlines()
            assert "percent-encode them" in line and "Secret1" not in line, line


def test_fold_says_what_a_reply_left_out_and_why(home: Path, model_server: Any) -> None:
    """Found by a review: a reply whose every item was malformed printed "folded 1", its
    reasons only in the journal."""
    mem = Memory(home)
    journal_turn(mem, "t", "I prefer vim over emacs.")
    mem.enqueue("t")
    mem.close()
    model_server.reply_next('{"newFacts": "oops", "factsToRemove": {"a": 1}}')
    result = cli("fold", "--home", str(home), "--timeout", "60")
    counts, line = result.stdout.splitlines()
    assert result.returncode == 0 and counts.startswith("folded 1,")
    assert "nothing to keep (t): left out 2" in line and "'newFacts' must be a list" in line


def test_a_port_out_of_range_is_one_usage_line(home: Path) -> None:
    """Found by a review: ``mcp --http --port -5`` and ``inspect --port -1`` were
    OverflowError tracebacks."""
    for command in (("mcp", "--http"), ("inspect",), ("serve-offline",)):
        for bad in ("-5", "99999"):
            result = cli(*command, "--port", bad)
            assert result.returncode == 2, (command, bad, result.stderr)
            assert f"'{bad}' is not a port from 0 to 65535" in result.stderr.splitlines()[-1]
            assert "Traceback" not in result.stderr


def test_a_busy_port_is_one_line_naming_the_fix(home: Path) -> None:
    """Found by a review: a busy port was ``[Errno 98] Address already in use`` (or a
    traceback, or Streamlit's log line)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command, free in (
            (("mcp", "--http"), "omit --port for a free one"),
            (("serve-offline",), "omit --port for a free one"),
            (("inspect",), "use --port 0 for a free one"),
        ):
            result = cli(*command, "--port", str(port))
            assert result.returncode == 2, (command, result.stderr)
            (line,) = result.stderr.splitlines()
            assert line.endswith(f"port {port} is in use: {free}, or pick another"), line


def test_team_limit_takes_only_a_count_the_servers_column_holds() -> None:
    """Found by a review: N past PostgreSQL's integer was psycopg's NumericValueOutOfRange
    traceback; it is refused before any connection (nothing listens at this URL)."""
    for bad in ("99999999999999999999", "2147483648", "-1", "ten"):
        result = cli("team", "limit", "churn", bad, "--url", "postgresql://owner@127.0.0.1:1/t")
        assert result.returncode == 2 and "Traceback" not in result.stderr
        said = result.stderr.splitlines()[-1]
        assert f"N: must be a count of facts from 0 to 2147483647, got '{bad}'" in said


def test_a_mistyped_home_in_the_environment_is_not_created_nor_exported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: ``export`` wrote an empty memory and said "exported to" (exit 0),
    and the read-only commands made the folder."""
    typo = tmp_path / "typo-home"
    monkeypatch.setenv("DEERFLOW_NB_HOME", str(typo))
    out = tmp_path / "x.json"
    for command in (("status",), ("export", str(out)), ("migrate",), ("doctor",), ("fold",)):
        result = cli(*command)
        assert result.returncode == 2, (command, result.stderr)
        (line,) = result.stderr.splitlines()
        assert f"no home folder {typo} ($DEERFLOW_NB_HOME); check the path" in line
    assert not typo.exists() and not out.exists()
    imported = tmp_path / "in.json"
    imported.write_text('{"facts": []}')
    assert cli("import", str(imported)).returncode == 0  # import may make a new home
    assert typo.is_dir()
