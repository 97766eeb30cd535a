"""A home this kernel cannot write (issue 37): ``%memory``'s reading subcommands read it
through the read door, as ``deerflow-nb status`` does, and a change says in one line why
it cannot be made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deerflow_nb.memory import Memory

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = (
    "import json\n"
    "from IPython.core.interactiveshell import InteractiveShell\n"
    "shell = InteractiveShell.instance()\n"
    "shell.run_line_magic('load_ext', 'deerflow_nb')\n"
    "facts = shell.run_line_magic('memory', 'facts')\n"
    "status = shell.run_line_magic('memory', 'status')\n"
    "added = shell.run_cell('%memory add I like tea')\n"
    "print(json.dumps({'facts': str(facts), 'status': str(status),\n"
    "                  'add': str(added.error_in_exec)}))\n"
)


def run_on_read_only(home: Path) -> subprocess.CompletedProcess[str]:
    """The notebook above in a process that cannot write ``home``: a read-only bind mount
    as root (root writes through file modes), the folder's modes otherwise."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    env["DEERFLOW_NB_HOME"] = str(home)
    command = [sys.executable, "-c", NOTEBOOK]
    if os.geteuid() == 0:
        mount = (
            f"mount --bind {home} {home} && mount -o remount,ro,bind {home} {home} && "
            f'touch {home}/probe 2>/dev/null && exit 97; exec "$@"'
        )
        command = ["unshare", "-m", "sh", "-c", mount, "sh", *command]
    else:
        for path in [home, *home.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=home.parent, timeout=120
    )


def test_memory_facts_reads_a_home_the_kernel_cannot_write(home: Path) -> None:
    with Memory(home) as mem:
        mem.add_fact("Prefers polars over pandas", "preference")
    before = {p.name: p.read_bytes() for p in home.iterdir() if p.is_file()}
    if os.geteuid() == 0 and shutil.which("unshare") is None:
        pytest.skip("running as root without unshare to mount the home read-only")
    result = run_on_read_only(home)
    if result.returncode in (1, 32) and "mount" in result.stderr:
        pytest.skip(f"no mount namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout.splitlines()[-1])
    assert "Prefers polars over pandas" in shown["facts"]
    assert "memory.json" in shown["status"]
    assert "writable" in shown["add"] and "\n" not in shown["add"]  # a change: one line
    for path in home.iterdir():
        path.chmod(0o755 if path.is_dir() else 0o644)
    home.chmod(0o755)
    assert {p.name: p.read_bytes() for p in home.iterdir() if p.is_file()} == before
