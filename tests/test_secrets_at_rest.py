"""Secrets never rest (issue 36): with a ``user:pass@`` base URL or an API key, no form of
the password or key (raw, URL-encoded, base64 of ``user:pass``, a ``Basic`` header, a
piece of 6 characters) is written to any file of the home (journal.db, its -wal and
-shm, memory.json) or to any log record at DEBUG (httpx's and openai's included), and
none reaches a cell, an error or ``doctor``, after real turns and folds and after every
error path. The servers are real HTTP on 127.0.0.1: the loopback model server, and a
small one that echoes the credentials it was sent in its error, as some proxies do."""

from __future__ import annotations

import base64
import json
import logging
import socket
import sqlite3
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from echo_server import EchoServer
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from loopback import start_server

from deerflow_nb import Agent
from deerflow_nb.cli import main as cli
from deerflow_nb.config import ConfigError, ModelConfig, load_settings
from deerflow_nb.doctor.checks import run_doctor
from deerflow_nb.llm import ModelError
from deerflow_nb.llm.openai_client import OpenAIChatModel

USER = "alice"
PASSWORD = "s3cr/t-Pa55word"  # its '/' must be written %2F in a URL
KEY = "corp9Zx+ab87/PLAINkey42"  # not shaped like an sk- key: only its value says it


def b64(text: str) -> list[str]:
    raw = text.encode()
    encoded = [base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()]
    return encoded + [e.rstrip("=") for e in encoded]


def forms(secret: str) -> list[str]:
    """Every form of ``secret`` a leak could take: whole, URL-encoded, every 6-character
    piece, and base64 of it alone and of ``user:secret`` (a ``Basic`` header's)."""
    pieces = [secret[i : i + 6] for i in range(len(secret) - 5)]
    return [secret, quote(secret, safe=""), *pieces, *b64(secret), *b64(f"{USER}:{secret}")]


SECRET_FORMS = forms(PASSWORD) + forms(KEY)


def leaks(text: str) -> list[str]:
    return [f for f in SECRET_FORMS if f in text]


def leaks_in_home(home: Path) -> list[str]:
    """Every secret form found in any file of the home, as bytes (the WAL included)."""
    found = []
    for path in sorted(p for p in home.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.name}: {f}" for f in SECRET_FORMS if f.encode() in data]
    return found


def url_at(port: int) -> str:
    return f"http://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/v1"


@pytest.fixture
def configure(home: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Point the model at ``base_url`` (with ``key``) through the environment, so no file
    of the home holds a secret the user put there."""

    def point(base_url: str, *, key: str | None = None, extra: str = "") -> None:
        (home / "config.yaml").write_text(
            "model:\n  name: m\n  max_retries: 0\n  timeout_seconds: 5\n" + extra,
            encoding="utf-8",
        )
        monkeypatch.setenv("OPENAI_BASE_URL", base_url)
        if key:
            monkeypatch.setenv("DEERFLOW_NB_API_KEY", key)

    return point


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record at DEBUG, from every logger (httpx's and openai's included)."""
    caplog.set_level(logging.DEBUG)
    yield caplog


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return caplog.text + "\n".join(r.getMessage() for r in caplog.records)


def test_turns_and_folds_through_a_url_with_a_password_leave_it_nowhere(
    home: Path, configure: Callable[..., None], debug_logs: pytest.LogCaptureFixture
) -> None:
    with start_server(models=("m",)) as server:
        server.refuse("max_tokens")  # a trait is learned and remembered in the journal
        configure(url_at(server.port), extra="memory:\n  embeddings: openai:m\n")
        agent = Agent(settings=load_settings(home))
        try:
            agent.run("I prefer polars over pandas for dataframes.", thread="t")
            agent.memory.enqueue("t")
            assert agent.memory.flush(timeout=60).folded == ["t"]
            agent.run("Which dataframe library do I like?", thread="t", on_text=lambda _: None)
        finally:
            agent.close()
        assert server.request_count > 3
    with sqlite3.connect(home / "journal.db") as db:
        endpoints = {r[0] for r in db.execute("SELECT endpoint FROM server_traits")}
        models = {r[0] for r in db.execute("SELECT DISTINCT model FROM embeddings")}
    assert endpoints == {f"http://127.0.0.1:{server.port}/v1"}  # named without user info
    assert models == {f"openai:m@http://127.0.0.1:{server.port}/v1"}
    assert not leaks_in_home(home)
    assert "127.0.0.1" in logged(debug_logs) and not leaks(logged(debug_logs))


def decoded(header: str) -> str:
    """``user:pass`` of a ``Basic`` header, or the bearer key."""
    kind, _, value = header.partition(" ")
    return base64.b64decode(value).decode() if kind == "Basic" else value


# (status, uses the password URL, else the key; what the server says back)
ECHOES: dict[str, tuple[int, bool, Callable[[str], str]]] = {
    "400 quoting the Basic header": (
        400,
        True,
        lambda h: f"bad request: got Authorization: {h} for {decoded(h)}",
    ),
    "401 quoting user:pw": (401, True, lambda h: f"no such user {decoded(h)}"),
    "400 quoting the key in base64": (
        400,
        False,
        lambda h: f"key {base64.b64encode(decoded(h).encode()).decode()} is not valid here",
    ),
    "400 cutting the key short": (400, False, lambda h: f"unknown key {decoded(h)[:7]}…"),
}


@pytest.fixture(params=sorted(ECHOES))
def case(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def echo(case: str, configure: Callable[..., None]) -> Iterator[EchoServer]:
    status, with_password, say = ECHOES[case]
    server = EchoServer(status, say)
    if with_password:
        configure(url_at(server.port))
    else:
        configure(f"http://127.0.0.1:{server.port}/v1", key=KEY)
    yield server
    server.stop()


def test_an_echoed_credential_reaches_no_error_cell_doctor_file_or_log(
    home: Path,
    case: str,
    echo: EchoServer,
    shell: InteractiveShell,
    debug_logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    agent = Agent(settings=load_settings(home))
    with pytest.raises(ModelError) as info:
        agent.run("hello", thread="t")
    shown = "".join(traceback.format_exception(info.value))
    agent.journal.add_message("t", {"role": "assistant", "content": "Noted."})
    agent.memory.enqueue("t")
    report = agent.memory.flush(timeout=60)
    shown += json.dumps(report.failed) + str(agent.memory.status())
    agent.close()

    with capture_output() as cap:
        result = shell.run_cell("%%agent -t s\nhello")
    assert result.error_in_exec is not None
    shown += str(result.error_in_exec) + cap.stdout + cap.stderr

    doctor = run_doctor(load_settings(home))
    assert doctor.failures  # the server refused every probe
    shown += str(doctor) + doctor._repr_html_() + doctor._repr_markdown_()
    cli(["doctor"])
    printed = capsys.readouterr()
    shown += printed.out + printed.err

    sent = {f"Basic {b64(f'{USER}:{PASSWORD}')[0]}"} if ECHOES[case][1] else {f"Bearer {KEY}"}
    # the credentials went as before, only as a header (doctor's /props goes without a key)
    assert echo.seen - {""} == sent
    assert "[redacted]" in shown and not leaks(shown), leaks(shown)
    assert not leaks_in_home(home)
    assert not leaks(logged(debug_logs))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_dead_server_behind_a_password_url_says_one_line_and_stores_nothing(
    home: Path,
    configure: Callable[..., None],
    debug_logs: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure(url_at(free_port()))
    agent = Agent(settings=load_settings(home))
    with pytest.raises(ModelError, match="cannot reach") as info:
        agent.run("hello", thread="t")
    agent.close()
    assert cli(["doctor"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and len(printed.err.splitlines()) == 1
    shown = "".join(traceback.format_exception(info.value)) + printed.err
    assert "alice:[redacted]@127.0.0.1" in shown and not leaks(shown)
    assert not leaks_in_home(home) and not leaks(logged(debug_logs))


@pytest.mark.parametrize(
    "base_url",
    [
        f"http://{USER}:{PASSWORD}@127.0.0.1:8080/v1",  # the '/' is not encoded
        f"http://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:80x/v1",  # not a port
    ],
)
def test_a_malformed_base_url_is_one_line_naming_the_fix_without_the_password(
    home: Path,
    configure: Callable[..., None],
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    base_url: str,
) -> None:
    configure(base_url)
    with pytest.raises(ConfigError) as info:
        load_settings(home)
    said = str(info.value)
    assert "\n" not in said and "%2F" in said and "port" in said and not leaks(said)
    with pytest.raises(ConfigError) as info:  # settings made in code, not read from a file
        OpenAIChatModel("m", ModelConfig(base_url=base_url))
    assert not leaks("".join(traceback.format_exception(info.value)))

    with capture_output() as cap:
        result = shell.run_cell("%%agent\nhello")
    shown = str(result.error_in_exec) + cap.stdout + cap.stderr
    assert "Traceback" not in shown and "%2F" in shown and not leaks(shown), shown

    assert cli(["doctor"]) == 2
    printed = capsys.readouterr()
    assert len(printed.err.strip().splitlines()) == 1 and "%2F" in printed.err
    assert "Traceback" not in printed.err and not leaks(printed.out + printed.err)


def test_an_old_homes_rows_naming_a_password_url_are_rewritten_and_zeroed(home: Path) -> None:
    """Rows written before this change (a trait, a lease, an embeddings cache key under a
    ``user:pass@`` address) are renamed when a writer migrates the journal, and the old
    text is not left in a free page of the file."""
    import sqlite_utils

    from deerflow_nb.memory import Memory
    from deerflow_nb.storage.migrations import MIGRATIONS

    old = url_at(8080)
    db = sqlite_utils.Database(home / "journal.db")
    db["_migrations"].create({"name": str, "applied_at": str}, pk="name")
    for name, fn in MIGRATIONS:
        if name.startswith("m018"):
            break
        fn(db)
        db["_migrations"].insert({"name": name, "applied_at": "2026-01-01"})
    db["server_traits"].insert(
        {"endpoint": old, "trait": "cap_param", "value": "max_tokens", "learned_at": "x"}
    )
    db["server_leases"].insert({"id": "l", "endpoint": old, "owner": "h:1", "started_at": "x"})
    db["embeddings"].insert(
        {"content_hash": "h", "model": f"openai:e@{old}", "dim": 1, "vector": b"\0" * 4,
         "created_at": "x"}
    )  # fmt: skip
    db.conn.commit()
    db.close()
    assert leaks_in_home(home)

    Memory(home).close()
    with sqlite3.connect(home / "journal.db") as conn:
        traits = conn.execute("SELECT endpoint, value FROM server_traits").fetchall()
        models = conn.execute("SELECT model FROM embeddings").fetchall()
    assert traits == [("http://127.0.0.1:8080/v1", "max_tokens")]
    assert models == [("openai:e@http://127.0.0.1:8080/v1",)]
    assert not leaks_in_home(home)
