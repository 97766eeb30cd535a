"""The inspector's writes: every one goes through the ``Memory`` API, never to a file.

``Memory`` does the locking, the atomic rename and the journaling (memory_events and a
memory_versions snapshot), so an edit made here is exactly as safe, and as audited, as
one made with ``%memory`` in the kernel that may be running beside the inspector.
Each call opens the home's ``Memory`` and closes it again, never starting it: the
inspector starts no queue worker, so it never calls a model or folds a kernel's pending
threads behind its back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..memory import MemoryFileError

if TYPE_CHECKING:
    from ..memory import Memory


@contextmanager
def _memory(home: Path) -> Iterator[Memory]:
    from ..memory import Memory

    mem = Memory(home)  # never started: no queue worker
    try:
        yield mem
    finally:
        mem.close()


def edit_fact(
    home: Path,
    fact_id: str,
    *,
    content: str | None = None,
    category: str | None = None,
    confidence: float | None = None,
) -> dict[str, Any]:
    """Change one fact's content, category or confidence; returns the fact as saved."""
    with _memory(home) as mem:
        return mem.facts.edit(fact_id, content, category=category, confidence=confidence)


def forget_fact(home: Path, fact_id: str) -> dict[str, Any]:
    """Remove one fact for good; returns it. KeyError when it is already gone."""
    with _memory(home) as mem:
        return mem.forget(fact_id)


def rollback(home: Path, version_id: int) -> None:
    """Make memory.json what it was at ``version_id`` (itself journaled as a new version)."""
    with _memory(home) as mem:
        mem.rollback(version_id)


def approve(home: Path, ids: list[int] | str) -> int:
    """Apply pending changes (``"all"`` or ids) as folds; how many were applied."""
    with _memory(home) as mem:
        return mem.approve(ids)


def reject(home: Path, ids: list[int] | str) -> int:
    """Drop pending changes (``"all"`` or ids); how many were dropped."""
    with _memory(home) as mem:
        return mem.review.reject(ids)


def decide_items(home: Path, op: str, change_id: int, numbers: list[int]) -> int:
    """Approve or reject only items ``numbers`` of one pending change (the rest keeps
    waiting); how many were decided (0: the change was decided elsewhere meanwhile)."""
    with _memory(home) as mem:
        decide = mem.review.approve_items if op == "approve" else mem.review.reject_items
        return decide(change_id, numbers)


def run(action: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """Call ``action`` and turn an expected failure into ``(False, message)`` for the page."""
    try:
        return True, action(*args, **kwargs)
    except KeyError as exc:
        return False, f"not found: {exc.args[0] if exc.args else exc} (changed meanwhile?)"
    except (ValueError, OSError, TimeoutError, MemoryFileError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
