"""``make lab`` starts JupyterLab, as root too (Jupyter refuses root without --allow-root,
which a container user meets first). It runs the Makefile's own recipe on the suite's
environment, with Jupyter's state in the test's folder, and waits for the server to answer."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from inspector_seed import free_port

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)


@pytest.mark.skipif(
    not (VENV / ".demo-installed").exists() or shutil.which("make") is None,
    reason="runs on the venv `make test` made (its .demo-installed stamp) with make",
)
def test_make_lab_serves_as_the_user_it_runs_as(tmp_path: Path) -> None:
    port = free_port()
    state = tmp_path / "jupyter"
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(state / "config"),
        "JUPYTER_DATA_DIR": str(state / "data"),
        "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
        "IPYTHONDIR": str(state / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    args = f"--port {port} --no-browser --IdentityProvider.token=lab-test"
    log = tmp_path / "lab.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "lab", f"VENV={VENV}", f"LAB_ARGS={args}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                url = f"http://127.0.0.1:{port}/api/status?token=lab-test"
                with urllib.request.urlopen(url, timeout=2) as response:
                    status = json.loads(response.read())
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                time.sleep(0.5)
        assert status is not None, (
            f"make lab did not serve (as uid {os.getuid()}):\n"
            + (log.read_text(errors="replace")[-3000:])
        )
        assert "started" in status
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
