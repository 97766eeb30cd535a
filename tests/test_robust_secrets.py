"""Secrets never reach the cell, ``last_error`` or the journal (issue 16.5).

A tiny HTTP server on 127.0.0.1 answers every request with 401 or 500 and echoes the
``Authorization`` header it got (and the bare key) in its error text, as some proxies
and misconfigured servers do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from echo_server import EchoServer, bearer

from deerflow_nb import Agent, Memory
from deerflow_nb.config import ConfigError, load_settings
from deerflow_nb.llm import ModelError
from deerflow_nb.scrub import redact

KEY = "sk-proj-Zq81testSECRETkey0123456789abcdef"
ODD_KEY = "corp-Zx9ab87PLAINsecret"  # a key without the sk- shape: only its value says it


def denied(header: str) -> str:
    return f"denied: got Authorization: {header} (key {bearer(header)})"


@pytest.fixture(params=[(401, False), (500, False), (500, True), (403, True)])
def echo_server(request: pytest.FixtureRequest) -> Iterator[EchoServer]:
    status, plain = request.param
    server = EchoServer(status, denied, plain=plain)
    yield server
    server.stop()


def configure(home: Path, base_url: str, key: str) -> None:
    (home / "config.yaml").write_text(
        f"model:\n  name: m\n  base_url: {base_url}\n  api_key: {key}\n  max_retries: 0\n"
        "  timeout_seconds: 5\n",
        encoding="utf-8",
    )


def everything_stored(home: Path) -> str:
    with sqlite3.connect(home / "journal.db") as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(
            repr(row) for table in tables for row in conn.execute(f"SELECT * FROM [{table}]")
        )


@pytest.mark.parametrize("key", [KEY, ODD_KEY])
def test_a_server_echoing_the_key_is_redacted_everywhere(
    home: Path, echo_server: EchoServer, key: str
) -> None:
    configure(home, echo_server.base_url, key)
    settings = load_settings(home)
    secret_part = key[5:]
    agent = Agent(settings=settings)
    with pytest.raises(ModelError) as info:
        agent.run("hello", thread="t", on_text=lambda _: None)
    shown = str(info.value)
    assert secret_part not in shown and "\n" not in shown
    assert agent.last_turn is not None and secret_part not in (agent.last_turn.error or "")

    memory = agent.memory
    agent.journal.add_message("t", {"role": "assistant", "content": "Noted."})
    memory.enqueue("t")
    report = memory.flush()
    assert report.failed and all(secret_part not in e for e in report.failed.values())
    assert secret_part not in (memory.status()["last_error"] or "")
    if echo_server.status == 500 and not echo_server.plain:  # the SDK shows a JSON message
        assert "[redacted]" in shown
    assert secret_part not in everything_stored(home)
    agent.close()


def test_the_cell_never_shows_the_key(shell: Any, home: Path) -> None:
    from IPython.core.error import UsageError

    server = EchoServer(500, denied)
    try:
        configure(home, server.base_url, KEY)
        with pytest.raises(UsageError) as info:
            shell.run_cell_magic("agent", "-t s", "hello")
        assert KEY[5:] not in str(info.value) and "answered 500" in str(info.value)
    finally:
        server.stop()


def test_redact_patterns() -> None:
    text = f"Authorization: Bearer {KEY}; key={KEY}; api_key: 'abcdef123456'; bearer xyz123"
    out = redact(text)
    assert KEY[3:] not in out and "abcdef123456" not in out and "xyz123" not in out
    assert redact("plain words stay, sk-ip is short", ["sk"]) == "plain words stay, sk-ip is short"
    assert redact(f"with {ODD_KEY} inside", [ODD_KEY]) == "with [redacted] inside"


def test_a_config_error_never_prints_a_key(home: Path) -> None:
    (home / "config.yaml").write_text(f"model:\n  name: [{KEY}]\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(home)
    assert KEY[3:] not in str(info.value) and "model.name" in str(info.value)
    (home / "config.yaml").write_text("model:\n  api_key: [x7Yplainsecret99]\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(home)
    assert "x7Yplainsecret99" not in str(info.value) and "model.api_key" in str(info.value)


def test_a_memory_without_a_server_still_works(home: Path) -> None:
    """The offline path is untouched by redaction."""
    with Memory(home) as memory:
        memory.add_fact("Uses sk-learn daily")  # a fact is not an error: kept as written
        assert memory.facts.list()[0]["content"] == "Uses sk-learn daily"
