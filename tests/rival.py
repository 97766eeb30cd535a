"""Another kernel on the same home, made to act at one chosen moment of this one.

A race between two kernels happens when one reads what it decides on, another commits a
competing change, and the first then commits. ``Rival`` makes that interleaving happen
every time: the test's kernel runs as usual, and the first time it calls the method named
(memory.json's lock, ``MemoryStore.locked``, say: it has read everything it decides on and
waits there for whoever holds the lock), a real second process opens ``Memory()`` on the
same home as ``m``, runs the rival's code to the end (taking the lock, the journal's
transaction, whatever its change needs) and exits; then the call goes on. What the rival
printed is in ``said``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


class Rival:
    """The code ``code`` (with ``m``, a ``Memory`` of ``home``), run once in its own process
    when ``before`` says so."""

    def __init__(self, home: Path, code: str, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.code = "from deerflow_nb import Memory\nm = Memory()\n" + textwrap.dedent(code)
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "DEERFLOW_NB_HOME": str(home)}
        self.env.update(env or {})
        self.said: list[str] | None = None  # its printed lines, once it has run

    def run(self) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", self.code],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        self.said = done.stdout.splitlines()
        return self.said

    def before(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        """Run first thing in ``owner.name``'s first call (later calls only do their own)."""
        original: Callable[..., Any] = getattr(owner, name)

        def first_the_rival(*args: Any, **kwargs: Any) -> Any:
            if self.said is None:
                self.run()
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, first_the_rival)
