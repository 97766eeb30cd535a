"""The real-browser harness shared by the JupyterLab tests: JupyterLab started on
127.0.0.1 with a known token in a temporary root (its config, data and runtime folders
temporary too, no update or news checks, no package index queries), and helpers for
driving it with headless Chromium (Debian's ``chromium`` through Playwright)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

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
TOKEN = "deerflow-test-token-5f1c"

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_lab(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    pytest.fail(f"no answer from {url} in {timeout:.0f} s:\n{log.read_text()}")


def wait_for_idle_kernel(port: int, timeout: float = 120) -> None:
    """Until the server lists the notebook's kernel as started and idle."""
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{port}/api/kernels?token={TOKEN}"
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=5) as response:
            kernels = json.load(response)
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
    tmp_path: Path, root: Path, server: ServerHandle | None = None
) -> tuple[subprocess.Popen, int]:
    """JupyterLab on 127.0.0.1 serving ``root``, its kernels' home ``tmp_path/deerflow-home``
    (also the home an example notebook opts into, ``DEERFLOW_NB_EXAMPLE_HOME``) and their
    model ``server``'s ``loopback-model`` (None: the offline model, no key)."""
    port = free_port()
    state = tmp_path / "jupyter"
    model = {} if server is None else {
        "OPENAI_BASE_URL": server.base_url,
        "DEERFLOW_NB_MODEL": "loopback-model",
    }  # fmt: skip
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DEERFLOW_NB_"))},
        "DEERFLOW_NB_HOME": str(tmp_path / "deerflow-home"),
        "DEERFLOW_NB_EXAMPLE_HOME": str(tmp_path / "deerflow-home"),
        **model,
        # this checkout for the kernel, whatever the environment's editable install says
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_DATA_DIR": str(state / "data"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "IPYTHONDIR": str(state / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    # every cell attached, on screen or not: a test counts and reads cells off screen too
    tracker = (
        state / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    )
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}), encoding="utf-8")
    log = tmp_path / "lab.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.open_browser=False",
                f"--LabApp.workspaces_dir={state / 'workspaces'}",
                f"--LabApp.user_settings_dir={state / 'settings'}",
                "--LabApp.news_url=",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly",  # no package index queries
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(root),
        )
    wait_for_lab(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", proc, log)
    return proc, port


def stop_lab(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
