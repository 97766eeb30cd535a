"""An export: memory written as an indented memory.json at a path the user names, never over
the home's own files (what ``MemoryReader.export`` and ``Memory.export`` both write; the
home itself is only read).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ...config import CONFIG_FILENAME, Settings


def write_export(
    settings: Settings, data: dict[str, Any], path: str | os.PathLike[str], *, overwrite: bool
) -> Path:
    """Write ``data`` as an indented memory.json at ``path``; returns the path.

    Never overwrites the home's own files, nor (unless ``overwrite``) any existing file:
    a mistyped path must not destroy the journal or another export.
    """
    target = Path(path)
    own = (settings.memory_path, settings.journal_path, settings.home / CONFIG_FILENAME)
    if _belongs_to(target, own):
        raise ValueError(f"{target} is this memory's own file; export to another path")
    if target.is_dir():
        raise ValueError(f"{target} is a folder; give a file path, say {target / 'memory.json'}")
    if target.exists() and not overwrite:
        raise ValueError(f"{target} exists; choose another path, or overwrite it with --force")
    text = json.dumps(data, indent=2, ensure_ascii=False)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def _belongs_to(target: Path, own: tuple[Path, ...]) -> bool:
    """Whether ``target`` is one of ``own`` or a file that goes with one, beside it under a
    name it starts (SQLite's ``-wal``, ``-shm`` and ``-journal``, a lock, a temp file, a
    kept-aside copy): overwriting the journal's write-ahead log destroys the journal."""
    found = target.resolve()
    for path in own:
        for place in {path, path.resolve()}:  # memory.json may link to a file elsewhere
            if found.parent == place.parent.resolve() and found.name.startswith(place.name):
                return True
    return False
