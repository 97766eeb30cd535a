"""An HTTP server on 127.0.0.1 that answers every request with one error status and a
message written from the ``Authorization`` header it got: how a model server that quotes
the credentials back (in JSON or plain text) is simulated by the secret-redaction tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class EchoServer:
    """Answers ``status`` with ``say(authorization_header)`` as an OpenAI-style JSON error
    (or as plain text with ``plain=True``); ``seen`` holds every header it got."""

    def __init__(self, status: int, say: Callable[[str], str], *, plain: bool = False) -> None:
        self.status, self.plain = status, plain
        seen = self.seen = set[str]()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                header = self.headers.get("Authorization") or ""
                seen.add(header)
                text = say(header)
                if plain:
                    body, kind = text.encode(), "text/plain"
                else:
                    body = json.dumps({"error": {"message": text, "type": "x"}}).encode()
                    kind = "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def bearer(header: str) -> str:
    """The key of a ``Bearer KEY`` header (the header itself when it is not one)."""
    return header.removeprefix("Bearer ")
