"""A base URL that is no OpenAI-compatible API (a web page answering 200, a proxy sending a
malformed stream line) is one line naming the fix, from a turn, a plain call and ``doctor``,
never the SDK's own traceback. Real HTTP on 127.0.0.1 (found by a review)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from deerflow_nb import Agent
from deerflow_nb.config import load_settings
from deerflow_nb.llm import ModelError, get_chat_model

NOT_THE_API = "did not answer as an OpenAI-compatible API"


def serve(answer: str) -> tuple[ThreadingHTTPServer, str]:
    """A server answering every request: ``"page"`` with a web page, ``"stream"`` with a
    stream whose data line is no JSON."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if answer == "page":
                body = b"<!doctype html><html><body>Please log in.</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"data: {not json}\n\ndata: [DONE]\n\n")

        do_GET = do_POST = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


@pytest.fixture
def wrong_server(home: Path, monkeypatch: pytest.MonkeyPatch, request: Any) -> Iterator[str]:
    server, url = serve(request.param)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_BASE_URL", url if request.param == "page" else f"{url}/v1")
    yield url
    server.shutdown()


@pytest.mark.parametrize("wrong_server", ["page", "stream"], indirect=True)
def test_a_call_and_a_turn_say_the_server_is_no_api(wrong_server: str) -> None:
    model = get_chat_model(load_settings())
    with pytest.raises(ModelError, match=NOT_THE_API):  # a whole reply
        model.chat([{"role": "user", "content": "hi"}])
    agent = Agent()
    # streamed: a page ends the stream empty, which a small prompt cannot have overflowed
    with pytest.raises(ModelError, match="OpenAI-compatible API"):
        agent.run("hello", use_memory=False)
    agent.close()


@pytest.mark.parametrize("wrong_server", ["page"], indirect=True)
def test_doctor_says_the_server_is_no_api_in_one_line(wrong_server: str) -> None:
    doctor = [sys.executable, "-m", "deerflow_nb.cli", "doctor"]  # the environment above
    done = subprocess.run(doctor, capture_output=True, text=True, timeout=120)
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == 2 and NOT_THE_API in said, said
    assert "Traceback" not in said
