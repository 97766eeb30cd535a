"""An export: memory written as an indented memory.json at a path the user names, never over
the home's own files (what ``MemoryReader.export`` and ``Memory.export`` both write; the
home itself is only read).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from ...config import CONFIG_FILENAME, Settings

_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}  # a full disk, or quota


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
        raise ValueError(_exists(target))
    payload = json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8")
    _write_whole(target.resolve() if target.is_symlink() else target, payload, overwrite)
    return target


def _write_whole(target: Path, payload: bytes, overwrite: bool) -> None:
    """Write ``payload`` to a temp file beside ``target`` (flushed and fsynced), then move it
    into place: a full disk fails on the temp, leaving an earlier export as it was and no
    truncated or empty file behind. Without ``overwrite`` the move is a link, which fails
    on a file made meanwhile rather than replacing it."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with tmp.open("xb") as fh:  # a new file, as the umask says
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite and target.exists():
            shutil.copymode(target, tmp)  # an overwrite keeps the file's permissions
        _move(tmp, target, overwrite)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise ValueError(_unwritable(target, exc)) from None
        raise


def _move(tmp: Path, target: Path, overwrite: bool) -> None:
    """Put ``tmp`` in ``target``'s place; without ``overwrite`` never over an existing file."""
    if overwrite:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise ValueError(_exists(target)) from None
    except OSError as exc:  # a file system without hard links
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        if target.exists():
            raise ValueError(_exists(target)) from None
        os.replace(tmp, target)
        return
    with contextlib.suppress(OSError):  # the export is in place; a leftover name is harmless
        tmp.unlink()


def _exists(target: Path) -> str:
    """The refusal of an export over a file the user did not say to overwrite."""
    return f"{target} exists; choose another path, or overwrite it with --force"


def _unwritable(target: Path, exc: OSError) -> str:
    """One line for an export that could not be written, naming the fix."""
    why = exc.strerror or str(exc)
    if exc.errno in _FULL:
        fix = "free some space on that disk, or export elsewhere"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "export to a folder you can write to"
    elif exc.errno == errno.ENOENT:
        fix = f"make the folder {target.parent} first, or export elsewhere"
    else:
        fix = "export elsewhere"
    return f"cannot write {target}: {why}; {fix}; nothing was changed"


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
