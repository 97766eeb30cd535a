"""The one way the tests and benchmarks start a Jupyter server process: ``jupyter server``
(``chat_server.py``) or JupyterLab (``jupyterlab_harness.py``), on 127.0.0.1 with a known
token, serving a temporary root, with every Jupyter and IPython folder temporary too, no
model key in its environment (the offline model) and this checkout first on its path."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "deerflow-test-token-5f1c"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def jupyter_env(tmp: Path, home: Path, path: Iterable[str] = ()) -> dict[str, str]:
    """The environment of a server or kernel on ``home``: no ``OPENAI_``/``DEERFLOW_NB_``
    variable but the home, this checkout then ``path`` first on ``PYTHONPATH``, the Jupyter
    and IPython folders under ``tmp/jupyter``."""
    state = tmp / "jupyter"
    state.mkdir(parents=True, exist_ok=True)  # IPython makes its folder only in one that exists
    python_path = [str(ROOT), *path, os.environ.get("PYTHONPATH", "")]
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DEERFLOW_NB_"))},
        "DEERFLOW_NB_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(p for p in python_path if p),
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_DATA_DIR": str(state / "data"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "IPYTHONDIR": str(state / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }


@dataclass
class JupyterProcess:
    """A running Jupyter server: its process, port and log; stopped at the end of a
    ``with`` block."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def __enter__(self) -> JupyterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start_jupyter(
    module: str,
    root: Path,
    env: dict[str, str],
    log: Path,
    args: Iterable[str] = (),
    python: str = sys.executable,
    timeout: float = 120,
) -> JupyterProcess:
    """``python -m module`` (``jupyter_server``, ``jupyterlab``) on 127.0.0.1 serving
    ``root``, its output in ``log``; returns once ``/api/status`` answers, raises
    RuntimeError (with the log) if it exits or stays silent for ``timeout`` seconds."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                python,
                "-m",
                module,
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.open_browser=False",
                *args,
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(root),
        )
    server = JupyterProcess(proc, port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{module} exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(server.url(f"api/status?token={TOKEN}"), timeout=2):
                return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"no answer from {module} in {timeout:.0f} s:\n{log.read_text()}")
