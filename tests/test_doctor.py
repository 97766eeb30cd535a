"""``deerflow-nb doctor`` and ``%memory doctor``: the offline model, the loopback server
(real HTTP through the openai SDK), a dead port, and models that cannot do what we need."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from loopback import ServerHandle

from deerflow_nb.config import load_settings
from deerflow_nb.doctor.checks import probe_extraction, run_doctor
from deerflow_nb.doctor.report import FAIL, OK, UNKNOWN, Check, DoctorReport
from deerflow_nb.llm.base import ChatModel, ChatResult, OnText
from deerflow_nb.memory.folding.extraction import build_messages
from deerflow_nb.memory.store import empty_memory
from deerflow_nb.offline.model import OfflineModel


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deerflow_nb.cli", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def rows(stdout: str) -> dict[str, str]:
    """``check name -> result`` from the terminal table (the first row per check)."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        for name in ("reachable", "streams", "tool calls", "context window", "JSON mode"):
            marker = f"  {name}  "
            if marker in line and name not in found:
                found[name] = line.split(marker, 1)[1].strip()
        if "  extraction  " in line and "extraction" not in found:
            found["extraction"] = line.split("  extraction  ", 1)[1].strip()
        if "  embeds  " in line:
            found["embeds"] = line.split("  embeds  ", 1)[1].strip()
    return found


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed on exit: nothing listens there


def test_offline_model_passes_every_check_quickly(home: Path) -> None:
    started = time.monotonic()
    result = doctor()
    assert result.returncode == 0, result.stderr
    found = rows(result.stdout)
    assert set(found) == {
        "reachable",
        "streams",
        "tool calls",
        "context window",
        "JSON mode",
        "extraction",
    }
    assert all(r.startswith(OK) for r in found.values()), result.stdout
    assert "6 of 6 checks passed" in result.stdout
    assert "→" not in result.stdout  # nothing to change
    assert time.monotonic() - started < 60
    assert not (home / "journal.db").exists()  # the doctor writes nothing


def test_loopback_server_over_real_http(model_server: ServerHandle) -> None:
    result = doctor()
    assert result.returncode == 0, result.stderr
    found = rows(result.stdout)
    assert model_server.base_url in result.stdout
    for name in ("reachable", "streams", "tool calls", "JSON mode", "extraction"):
        assert found[name].startswith(OK), result.stdout
    assert "serves loopback-model" in found["reachable"]
    assert "called list_variables" in found["tool calls"]
    assert "items valid" in found["extraction"]
    # The loopback server does not say its window: unknown, with what to set.
    assert found["context window"].startswith(UNKNOWN)
    assert "set model.max_input_tokens" in result.stdout
    assert model_server.request_count >= 5


def test_the_doctor_learns_the_server_and_says_what_deerflow_nb_does(
    model_server: ServerHandle, home: Path
) -> None:
    """The loopback server streams two replies at once and ignores output caps (as some
    local servers do): the cap row is a ✗ naming the fix; each server row says what
    deerflow_nb does. A server refusing ``json_schema`` is sent JSON mode with a schema."""
    from deerflow_nb.doctor import server_checks as server_checks

    model_server.refuse("json_schema")
    report = run_doctor(load_settings(home))
    by_name = {c.name: c for c in report.checks}
    two = by_name["two requests"]
    assert two.status == OK and "deerflow_nb: a fold never sends" in two.fix
    cap = by_name["output cap"]
    assert cap.status == FAIL and "honours neither" in cap.detail
    assert f"max_tokens {server_checks.CAP_PROBE}:" in cap.detail and "max_input_tokens" in cap.fix
    schema = by_name["JSON schema"]
    assert "JSON mode + schema" in schema.detail and "json_schema (400)" not in schema.detail
    sent = [r.get("response_format") for r in model_server.chat_requests]
    assert {"type": "json_object", "schema": server_checks.SCHEMA_PROBE} in sent
    assert not (home / "journal.db").exists()  # the doctor writes nothing


def test_the_doctor_does_not_wait_behind_this_kernels_fold(
    model_server: ServerHandle, home: Path
) -> None:
    """A fold streaming when the doctor starts gives way at its next chunk."""
    import threading

    from deerflow_nb.llm import get_chat_model
    from deerflow_nb.llm.server_sharing import GiveWay

    settings = load_settings(home)
    fold_model = get_chat_model(settings)
    model_server.slow_next(0.2)
    outcome: list[BaseException] = []
    streaming = threading.Event()

    def fold() -> None:
        try:
            fold_model.chat([{"role": "user", "content": "Explain gradient boosting"}],
                            background=True, on_text=lambda _t: streaming.set())  # fmt: skip
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=fold)
    worker.start()
    assert streaming.wait(10)
    report = run_doctor(settings)
    worker.join(10)
    assert [type(e) for e in outcome] == [GiveWay]
    assert report.checks[1].name == "streams" and report.checks[1].status == OK


def test_a_memory_model_the_server_lacks_is_a_cross_with_the_fix(
    model_server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEERFLOW_NB_MEMORY_MODEL", "no-such-model")
    result = doctor()
    assert result.returncode == 0, result.stderr  # the checks ran; some failed
    found = rows(result.stdout)
    assert found["streams"].startswith(OK)
    assert found["JSON mode"].startswith(FAIL) and found["extraction"].startswith(FAIL)
    assert "model 'no-such-model' not found" in found["JSON mode"]
    lines = result.stdout.splitlines()
    for i, line in enumerate(lines):  # every ✗ is followed by what to change
        if f"  {FAIL} " in line:
            assert lines[i + 1].strip().startswith("→ "), result.stdout
    assert "memory model 'no-such-model'" in lines[0]


def test_openai_embeddings_are_checked_when_set(model_server: ServerHandle, home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  embeddings: openai:loopback-model\n")
    result = doctor()
    assert result.returncode == 0, result.stderr
    embeds = rows(result.stdout)["embeds"]
    assert embeds.startswith(OK) and "dimensions" in embeds


def test_a_dead_port_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{dead_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("DEERFLOW_NB_MODEL", "some-model")
    started = time.monotonic()
    result = doctor()
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert f"cannot reach {url}" in line and "OPENAI_BASE_URL" in line
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30


def test_a_mistyped_home_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = doctor("--home", str(tmp_path / "typo"))
    assert result.returncode == 2 and "no home folder" in result.stderr
    assert not (tmp_path / "typo").exists()


# -- models that fall short ------------------------------------------------------------
class Chatty(ChatModel):
    """Answers everything in plain (hostile) text: no tool calls, no JSON."""

    name = "chatty"

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        json_mode: bool = False,
        on_text: OnText | None = None,
    ) -> ChatResult:
        text = "Sure! <img src=x onerror=alert(1)> **bold** | pipe"
        if on_text is not None:
            on_text(text)
        return ChatResult(text)


class Silent(OfflineModel):
    """Streams nothing at all, as a server that closes the stream at once."""

    name = "silent"

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatResult:
        if kwargs.get("on_text") is not None:
            return ChatResult("", finish_reason="")
        return super().chat(messages, **kwargs)


def test_a_model_without_tools_or_json_gets_crosses_and_fixes() -> None:
    report = run_doctor(load_settings(), chat=Chatty(), memory=Chatty())
    by_name = {c.name: c for c in report.checks}
    assert by_name["streams"].status == OK
    assert by_name["tool calls"].status == FAIL and "tool-call chat template" in (
        by_name["tool calls"].fix
    )
    assert by_name["JSON mode"].status == FAIL and "memory.model_name" in by_name["JSON mode"].fix
    assert by_name["extraction"].status == FAIL
    assert "0 of 0 items valid" in by_name["extraction"].detail
    assert "the reply holds no JSON object" in by_name["extraction"].detail
    assert len(report.failures) == 3
    # Model text is shown escaped in every reading.
    html = report._repr_html_()
    assert "<img" not in html and "&lt;img" in html
    markdown = report._repr_markdown_()
    assert not re.search(r"(?<!\\)<img", markdown) and "\\<img" in markdown
    assert "\\*\\*bold\\*\\*" in markdown and "\\| pipe" in markdown
    assert "<img" in str(report)  # the terminal shows the text as it is, controls removed


def test_a_stream_with_no_chunk_is_a_cross() -> None:
    report = run_doctor(load_settings(), chat=Silent())
    (streams,) = [c for c in report.checks if c.name == "streams"]
    assert streams.status == FAIL and "no chunk" in streams.detail
    assert "context window" in streams.fix


def test_report_rendering_escapes_and_removes_controls() -> None:
    report = DoctorReport(
        "doctor \x1b[31mred",
        [Check("chat 'x'", "streams", FAIL, "said </td><script>x</script>", "fix \u202eit")],
    )
    text = str(report)
    assert "\x1b" not in text and "\u202e" not in text and "→ fix it" in text
    assert "<script>" not in report._repr_html_()
    assert not re.search(r"(?<!\\)<", report._repr_markdown_())
    assert "0 of 1 checks passed" in text


def test_probe_extraction_counts_valid_items() -> None:
    _, handles = build_messages(empty_memory(), [{"role": "user", "content": "hi"}])
    good = {
        "user": {"workContext": {"summary": "Data scientist", "shouldUpdate": True}},
        "newFacts": [
            {"content": "Prefers polars", "category": "preference", "confidence": 0.9},
            {"content": "Uses scikit-learn", "category": "behavior", "confidence": 0.8},
        ],
        "factsToRemove": [],
    }
    assert probe_extraction(json.dumps(good), handles) == (3, 3, [])
    bad = dict(good, user={"workContext": "Data scientist"})
    valid, total, reasons = probe_extraction(json.dumps(bad), handles)
    assert total == 3 and valid < total and reasons
    assert probe_extraction("no json here", handles)[:2] == (0, 0)


# -- %memory doctor --------------------------------------------------------------------
def test_memory_doctor_in_a_shell(shell: InteractiveShell) -> None:
    report = shell.run_line_magic("memory", "doctor")
    assert isinstance(report, DoctorReport) and not report.failures
    assert "| model | check | result | what to change |" in report._repr_markdown_()
    assert "<table>" in report._repr_html_()


def test_memory_doctor_against_a_dead_port_is_one_usage_line(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deerflow_nb.notebook.session import close_session

    url = f"http://127.0.0.1:{dead_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("DEERFLOW_NB_MODEL", "some-model")
    close_session(shell)  # the next %memory reads the new configuration
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("memory", "doctor")
    assert f"cannot reach {url}" in str(info.value) and "\n" not in str(info.value)


def test_ollamas_api_show_gives_the_context_window() -> None:
    from deerflow_nb.doctor.checks import _window_from_show

    show = {"model_info": {"general.architecture": "llama", "llama.context_length": 131072}}
    assert _window_from_show(show) == 131072
    assert _window_from_show({"parameters": "stop <|eot|>\nnum_ctx 8192"}) == 8192
    assert _window_from_show({"model_info": {}}) is None and _window_from_show(None) is None


class EntityJson(Chatty):
    """Answers in JSON whose key holds HTML entities, as a small model copying a prompt's
    escaped tags does."""

    name = "entities"

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatResult:
        return ChatResult('{"&lt;/conversation&gt;": "Tom &amp; Jerry"}')


def test_a_models_html_entities_read_as_characters_in_the_terminal() -> None:
    report = run_doctor(load_settings(), chat=Chatty(), memory=EntityJson())
    (extraction,) = [c for c in report.checks if c.name == "extraction"]
    assert "its keys: </conversation>" in extraction.detail, extraction.detail
    assert "&lt;" not in str(report) and "&gt;" not in str(report)
    html = report._repr_html_()  # escaped once, by the HTML view itself
    assert "its keys: &lt;/conversation&gt;" in html and "&amp;lt;" not in html


def test_an_embeddings_setting_that_cannot_load_is_a_cross_with_its_fix_and_exit_1(
    home: Path,
) -> None:
    (home / "config.yaml").write_text("memory:\n  embeddings: local:no-such-model\n")
    result = doctor()
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "  embeds  " in line]
    assert f"{FAIL} memory.embeddings 'local:no-such-model' cannot be loaded" in lines[at]
    assert lines[at + 1].strip().startswith("→ give a sentence-transformers model folder")
    assert "server's log" not in result.stdout


def weird_models_server() -> tuple[ThreadingHTTPServer, str]:
    """A server answering 200 ``{"weird": true}`` to ``/v1/models`` and 404 to the rest."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            found = self.path.rstrip("/").endswith("/v1/models")
            body = b'{"weird": true}' if found else b'{"error": {"message": "no route"}}'
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/v1"


def test_a_models_answer_without_data_lists_no_models(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, url = weird_models_server()
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("DEERFLOW_NB_MODEL", "some-model")
        result = doctor()
    finally:
        server.shutdown()
    assert "Traceback" not in result.stderr, result.stderr
    assert rows(result.stdout)["reachable"] == f"{OK} {url} answers, but lists no models"
