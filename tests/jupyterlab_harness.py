"""The real-browser harness shared by the JupyterLab tests: JupyterLab started on
127.0.0.1 with a known token in a temporary root (its config, data and runtime folders
temporary too, no update or news checks, no package index queries), and helpers for
driving it with headless Chromium (Debian's ``chromium`` through Playwright), with the
hostile reply the untrusted-text browser tests show and a ``Beacon`` that records what a
page fetched."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from jupyter_proc import TOKEN, JupyterProcess, jupyter_env, start_jupyter

if TYPE_CHECKING:
    from deerflow_nb.offline.server import ServerHandle

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NEEDS_CHROMIUM = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Debian's chromium is not installed at /usr/bin/chromium (`make test` installs it)",
)

VISIBLE = "HOSTILE-REPLY-VISIBLE-TEXT"
# What in a rendered output could run script or fetch something, found in the live DOM.
LIVE_PARTS = """outputs => {
  const found = [];
  for (const node of outputs.flatMap(el => [...el.querySelectorAll('*')])) {
    const tag = node.tagName.toLowerCase();
    if (['img', 'script', 'iframe', 'svg', 'image', 'object', 'embed', 'video', 'audio',
         'source', 'link', 'style', 'form', 'details'].includes(tag)) found.push(tag);
    for (const attr of node.attributes) {
      const name = attr.name.toLowerCase(), value = attr.value.trim().toLowerCase();
      if (name.startsWith('on') || name === 'src' || name === 'srcdoc') found.push(name);
      if (name === 'href' && !/^(https?:|mailto:|#)/.test(value)) found.push(`href=${value}`);
    }
  }
  return found;
}"""


def put_marker(name: str) -> str:
    """JavaScript that writes ``name`` into the server's root through the contents API."""
    body = "JSON.stringify({type:'file',format:'text',content:'pwned'})"
    return (
        f"fetch('/api/contents/{name}',{{method:'PUT',headers:{{'Authorization':"
        f"'token {TOKEN}','Content-Type':'application/json'}},body:{body}}})"
    )


def hostile_text(tag: str, beacon: str) -> str:
    """A reply trying every way to run script or fetch something; ``tag`` names the
    marker files and beacon paths it would produce."""
    return "\n\n".join(hostile_parts(tag, beacon))


def hostile_parts(tag: str, beacon: str) -> list[str]:
    return [
        f"{VISIBLE} ({tag}). Here is your answer.",
        f'<img src=x onerror="{put_marker(f"{tag}-img.txt")}">',
        f"<script>{put_marker(f'{tag}-script.txt')}</script>",
        f'<iframe srcdoc="<script>parent.{put_marker(f"{tag}-iframe.txt")}</script>"></iframe>',
        f'<svg><image href="{beacon}/{tag}/svg" onload="{put_marker(f"{tag}-svg.txt")}">'
        "</image></svg>",
        f"[click me](javascript:{put_marker(f'{tag}-link.txt')})",
        f"![beacon]({beacon}/{tag}/markdown-image.png)",
        f'<img src="{beacon}/{tag}/html-image.png">',
        f"<details open><summary>more</summary>{VISIBLE} in details</details>",
    ]


class Beacon:
    """An HTTP server on 127.0.0.1 that records the path of every request."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        beacon = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                beacon.paths.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# What tornado logs when the browser leaves while the server still writes to its websocket
# (the page closes at the end of a test): the client went away, nothing of ours failed.
CLIENT_GONE = ("tornado.websocket.WebSocketClosedError", "tornado.iostream.StreamClosedError")


def server_failures(log: str) -> list[str]:
    """The exception that ends each traceback in a server's log, except a client gone."""
    lines = log.splitlines()
    failures = []
    for start, line in enumerate(lines):
        if not line.startswith("Traceback (most recent call last):"):
            continue
        last = next(
            (text for text in lines[start + 1 :] if text and not text[0].isspace()),
            "(traceback cut off)",
        )
        if not last.startswith(CLIENT_GONE):
            failures.append(last)
    return failures


def wait_for_idle_kernel(port: int, timeout: float = 120) -> None:
    """Until the server lists the notebook's kernel as started and idle."""
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{port}/api/kernels?token={TOKEN}"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                kernels = json.load(response)
        except urllib.error.HTTPError as exc:  # a kernel still starting can fail the listing
            if exc.code != 500:  # (jupyter_server 2.21: its last_activity is still None)
                raise
            kernels = []
        if kernels and all(k.get("execution_state") == "idle" for k in kernels):
            return
        time.sleep(0.5)
    pytest.fail(f"the notebook's kernel was not idle within {timeout:.0f} s")


def open_notebook(page: Any, port: int, name: str) -> Any:
    """Open ``name`` in JupyterLab and wait until its kernel is idle; its cells' locator."""
    from playwright.sync_api import expect

    page.goto(
        f"http://127.0.0.1:{port}/lab/tree/{name}?token={TOKEN}", wait_until="domcontentloaded"
    )
    cells = page.locator(".jp-Notebook .jp-Cell")
    expect(cells.first).to_be_visible(timeout=120_000)
    wait_for_idle_kernel(port)
    idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    expect(idle.first).to_be_attached(timeout=120_000)
    return cells


def run_cell(page: Any, cell: Any, attempts: int = 3) -> None:
    """Run one cell with Shift+Enter in its editor; again if the keypress was lost (the
    prompt still reads ``[ ]``), as it can be while the page is still settling."""
    from playwright.sync_api import expect

    prompt = cell.locator(".jp-InputPrompt")
    for attempt in range(attempts):
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        try:
            expect(prompt).not_to_have_text("[ ]:", timeout=15_000)
            return
        except AssertionError:
            if attempt == attempts - 1:
                raise


def start_lab(
    tmp_path: Path,
    root: Path,
    server: ServerHandle | None = None,
    python: str = sys.executable,
    args: Iterable[str] = (),
) -> JupyterProcess:
    """JupyterLab (``jupyter_proc.start_jupyter``) of ``python``'s environment serving
    ``root``, its kernels' and personas' home ``tmp_path/deerflow-home`` (also the home an
    example notebook opts into, ``DEERFLOW_NB_EXAMPLE_HOME``) and their model ``server``'s
    ``loopback-model`` (None: the offline model, no key); ``args`` go to JupyterLab."""
    state = tmp_path / "jupyter"
    env = jupyter_env(tmp_path, tmp_path / "deerflow-home")
    env["DEERFLOW_NB_EXAMPLE_HOME"] = env["DEERFLOW_NB_HOME"]
    if server is not None:
        env.update(OPENAI_BASE_URL=server.base_url, DEERFLOW_NB_MODEL="loopback-model")
    settings = {
        # every cell attached, on screen or not: a test counts and reads cells off screen too
        "notebook-extension/tracker": {"windowingMode": "none"},
        # no "get notified about Jupyter news?" toast over the page (and no fetch for it)
        "apputils-extension/notification": {"fetchNews": "false"},
    }
    for name, values in settings.items():
        path = state / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")
    return start_jupyter(
        "jupyterlab",
        root,
        env,
        tmp_path / "lab.log",
        [
            f"--LabApp.workspaces_dir={state / 'workspaces'}",
            f"--LabApp.user_settings_dir={state / 'settings'}",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # no package index queries
            *args,
        ],
        python=python,
    )


@contextmanager
def chromium_page(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A page of headless Chromium (Playwright), closed with its browser afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()
