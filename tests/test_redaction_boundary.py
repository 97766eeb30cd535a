"""One redaction boundary (``scrub.redact``): a model server's errors and replies never
show the key, a piece of it, its URL-encoded form or a ``user:pass@`` password in a cell,
a traceback, the journal, ``last_error`` or ``doctor``. The servers here are real HTTP on
127.0.0.1 that echo what they were sent, as some proxies do."""

from __future__ import annotations

import re
import sqlite3
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from echo_server import EchoServer, bearer
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from loopback import ServerHandle

from deerflow_nb import Agent
from deerflow_nb.config import load_settings
from deerflow_nb.doctor.checks import run_doctor
from deerflow_nb.llm import ModelError
from deerflow_nb.scrub import redact

# Not shaped like an sk- key: only knowing the configured value finds it. The / + = are
# changed by URL encoding.
KEY = "corp/Zx9+ab87=PLAINsecret42"
PASSWORD = "hunter2-Passw0rd"


def pieces(secret: str) -> list[str]:
    """Every 8-character piece of ``secret``, and its URL-encoded whole."""
    return [secret[i : i + 8] for i in range(len(secret) - 7)] + [quote(secret, safe="")]


def leaked(text: str) -> list[str]:
    return [p for p in pieces(KEY) + [PASSWORD] if p in text]


ECHOES: dict[str, Callable[[str], str]] = {
    # the key starts at character 185: a cut at 200 left its first 14 characters
    "cut": lambda key: "x" * 185 + f" {key} was refused",
    "url-encoded": lambda key: f"bad request to /v1/chat?key={quote(key, safe='')}",
    "a piece": lambda key: f"unknown key ...{key[4:16]}...",
}


@pytest.fixture(params=sorted(ECHOES))
def echo(request: pytest.FixtureRequest, home: Path) -> Iterator[EchoServer]:
    say = ECHOES[request.param]
    server = EchoServer(400, lambda header: say(bearer(header)))
    (home / "config.yaml").write_text(
        f"model:\n  name: m\n  base_url: http://alice:{PASSWORD}@127.0.0.1:{server.port}/v1\n"
        f"  api_key: '{KEY}'\n  max_retries: 0\n  timeout_seconds: 5\n",
        encoding="utf-8",
    )
    yield server
    server.stop()


def everything_stored(home: Path) -> str:
    with sqlite3.connect(home / "journal.db") as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(
            repr(row) for table in tables for row in conn.execute(f"SELECT * FROM [{table}]")
        )


def test_an_echoed_key_never_reaches_the_error_journal_or_last_error(
    home: Path, echo: EchoServer
) -> None:
    agent = Agent(settings=load_settings(home))
    with pytest.raises(ModelError) as info:
        agent.run("hello", thread="t")
    shown = "".join(traceback.format_exception(info.value))
    assert not leaked(shown), shown
    assert "alice:[redacted]@127.0.0.1" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert agent.last_turn is not None and not leaked(agent.last_turn.error or "")

    agent.journal.add_message("t", {"role": "assistant", "content": "Noted."})
    agent.memory.enqueue("t")
    report = agent.memory.flush()
    assert report.failed and not leaked(" ".join(report.failed.values()))
    assert not leaked(agent.memory.status()["last_error"] or "")
    agent.close()
    assert not leaked(everything_stored(home))


@pytest.mark.parametrize(
    "code",
    [
        "from deerflow_nb import Agent\nAgent().run('hello', thread='t')",
        "from deerflow_nb import Memory\n"
        "m = Memory()\nm.add_fact('Uses polars')\nm.add_fact('Uses duckdb')\nm.consolidate()",
    ],
)
def test_a_model_error_raised_in_a_cell_shows_no_key_in_its_traceback(
    ipython: InteractiveShell, echo: EchoServer, code: str
) -> None:
    with capture_output() as cap:
        result = ipython.run_cell(code)
    assert isinstance(result.error_in_exec, ModelError)
    saved = "".join(traceback.format_exception(result.error_in_exec))
    assert not leaked(saved + cap.stdout + cap.stderr), saved


def test_doctor_shows_no_key_a_server_echoes_in_a_normal_reply(
    model_server: ServerHandle, monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    monkeypatch.setenv("DEERFLOW_NB_API_KEY", KEY)
    for _ in range(12):
        model_server.reply_next(f"Hello, your key is {KEY} today")
    report = run_doctor(load_settings(home))
    assert model_server.seen_keys and KEY in model_server.seen_keys  # it was sent and echoed
    for text in (str(report), report._repr_html_(), report._repr_markdown_()):
        assert not leaked(text), text

    with_password = model_server.base_url.replace("http://", f"http://alice:{PASSWORD}@")
    monkeypatch.setenv("OPENAI_BASE_URL", with_password)
    report = run_doctor(load_settings(home))
    assert "alice:[redacted]@127.0.0.1" in report.title and not leaked(str(report))


def test_redact_finds_pieces_encodings_and_url_passwords() -> None:
    lowercase_escapes = re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(KEY, safe=""))
    text = f"a {KEY[3:15]} b {lowercase_escapes} c https://u:{PASSWORD}@h/v1"
    out = redact(text, [KEY])
    assert not leaked(out) and out.count("[redacted]") == 3, out
    assert redact("short keywo", ["keywo-long-secret"]) == "short keywo"  # 5 < 6
