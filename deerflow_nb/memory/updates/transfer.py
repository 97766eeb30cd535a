"""Whole-memory moves: export to a file, import a (DeerFlow) memory.json, reset to empty;
and the same for one project (its facts and summary only).

Import and reset are the user's change sets through the gate: a whole import replaces the
document, a project's import adds its facts to the project like ``%memory add`` would."""

from __future__ import annotations

import copy
import json
import os
import stat
from collections import Counter
from pathlib import Path
from typing import Any

from ...config import Settings
from ...projects import PROJECT_SCOPE, project_name
from ...schema.changes import ChangeSet
from ..readside.export_file import write_export
from ..scopes import PROJECTS_KEY, Scope
from ..store import check_schema, empty_memory, loads_document
from .gate import Gate
from .write_protocol import Ledger

MAX_IMPORT_BYTES = 20 * 1024 * 1024  # a memory.json to import may be at most 20 MB


def read_import(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The memory document at ``path``, checked; ValueError says why it cannot be imported."""
    source = Path(path)
    try:
        data = loads_document(_read_bounded(source))
    except UnicodeDecodeError as exc:
        reason = exc.reason
        raise ValueError(f"{source}: cannot import, it is not UTF-8 text ({reason})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: cannot import, not a readable JSON file ({exc})") from None
    except OSError as exc:
        raise ValueError(f"{source}: cannot import, {exc.strerror or exc}") from None
    except ValueError as exc:
        if str(exc).startswith(f"{source}:"):
            raise
        raise ValueError(f"{source}: cannot import, {exc}") from None
    problem = check_schema(data)
    if problem:
        raise ValueError(f"{source}: cannot import, {problem}")
    return data


def _read_bounded(source: Path) -> bytes:
    """The bytes of the regular file at ``source``, at most ``MAX_IMPORT_BYTES``.

    Checked on the opened file before reading: a device (``/dev/zero`` reports size 0 and
    never ends), a FIFO (opening one waits for a writer; non-blocking here) or a directory
    is refused, and a file that grows past the cap while read is cut off and refused."""
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise ValueError(f"{source}: cannot import, it is {kind}; name a memory.json file")
    with os.fdopen(fd, "rb") as file:
        limit = f"an import may be at most {MAX_IMPORT_BYTES // 2**20} MB"
        if info.st_size > MAX_IMPORT_BYTES:
            raise ValueError(
                f"{source}: cannot import, it is {info.st_size / 2**20:.1f} MB and {limit}; "
                "remove facts from it first"
            )
        data = file.read(MAX_IMPORT_BYTES + 1)
    if len(data) > MAX_IMPORT_BYTES:
        raise ValueError(f"{source}: cannot import, it grew past the cap while read ({limit})")
    return data


def project_document(data: dict[str, Any], project: str) -> dict[str, Any]:
    """A memory.json-shaped document of ``project`` alone: its facts (as stored, scope
    included) and its summary; no user facts, empty user and history sections."""
    doc = empty_memory()
    scope = Scope.own(project)
    doc["facts"] = [copy.deepcopy(f) for f in data.get("facts") or [] if scope.sees(f)]
    entry = (data.get(PROJECTS_KEY) or {}).get(project)
    if isinstance(entry, dict):
        doc[PROJECTS_KEY] = {project: copy.deepcopy(entry)}
    return doc


class ImportReport(int):
    """What an import kept: the int is how many facts it stored (new ones, for a project's
    import), as ``import_`` always returned; ``total`` the facts in the file, ``known``
    those a project already held (confirmed, not added twice) and ``not_kept`` why each
    other one was not stored (``{item, reason, value}``)."""

    total: int
    known: int
    not_kept: list[dict[str, str]]

    def __new__(
        cls, kept: int, total: int, known: int = 0, not_kept: list[dict[str, str]] | None = None
    ) -> ImportReport:
        report = super().__new__(cls, kept)
        report.total, report.known, report.not_kept = total, known, list(not_kept or [])
        return report

    def describe(self, where: str) -> str:
        """The import in one line: ``Imported 50 of 200 facts into project X from P (3
        already known); 147 not kept: 140 because memory is full (…), 7 because …``."""
        of = f" of {self.total}" if self.not_kept else ""
        line = f"Imported {_facts(int(self), of)} {where}"
        if self.known:
            line += f" ({self.known} already known)"
        if self.not_kept:
            reasons = Counter(item["reason"] for item in self.not_kept)
            why = ", ".join(f"{n} because {reason}" for reason, n in reasons.most_common())
            line += f"; {len(self.not_kept)} not kept: {why}"
        return line


def _facts(n: int, of: str = "") -> str:
    return f"{n}{of} fact" + ("" if n == 1 and not of else "s")


def checked_facts(facts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The facts an import may store, and why each other one may not: a confidence must be
    a number from 0 to 1 (a 99 is not a confidence), a fact must have some text."""
    kept, rejected = [], []
    for i, fact in enumerate(facts):
        confidence = fact.get("confidence", 0.0)
        value = str(fact.get("id", "?"))
        reason = ""
        if not str(fact.get("content") or "").strip():
            reason = "they have no text"
        elif isinstance(confidence, bool) or not 0 <= confidence <= 1:
            reason = "their confidence is not a number from 0 to 1"
            value += f" (confidence {confidence!r})"
        if reason:
            rejected.append({"item": f"facts[{i}]", "reason": reason, "value": value[:80]})
        else:
            kept.append(fact)
    return kept, rejected


def project_diff(data: dict[str, Any], project: str) -> dict[str, Any]:
    """An imported document's facts as a diff adding them to ``project`` (whatever scope
    they had), each with its ``createdAt`` and ``source``, with its summary when it holds
    exactly one project's (or ``project``'s)."""
    facts = [
        {
            "content": f["content"],
            "category": f.get("category") or "context",
            "confidence": f.get("confidence", 0.9),
            "scope": PROJECT_SCOPE,
            "project": project,
            **{k: f[k] for k in ("createdAt", "source") if k in f},
        }
        for f in data.get("facts") or []
    ]
    diff: dict[str, Any] = {"newFacts": facts}
    entries = {k: v for k, v in (data.get(PROJECTS_KEY) or {}).items() if isinstance(v, dict)}
    entry = entries.get(project) or (next(iter(entries.values())) if len(entries) == 1 else None)
    if entry and isinstance(entry.get("summary"), str) and entry["summary"].strip():
        diff["projectContext"] = {"summary": entry["summary"], "shouldUpdate": True}
    return diff


class Transfer:
    """Export, import and reset, each journaled as a version that can be rolled back."""

    def __init__(self, settings: Settings, ledger: Ledger, gate: Gate) -> None:
        self.settings = settings
        self.ledger = ledger
        self.gate = gate

    def export(
        self, path: str | os.PathLike[str], *, overwrite: bool = False, project: str | None = None
    ) -> Path:
        """Write memory (or ``project``'s part, ``project_document``) as an indented
        memory.json at ``path`` (``write_export``)."""
        data = self.ledger.current()
        if project is not None:
            data = project_document(data, project)
        return write_export(self.settings, data, path, overwrite=overwrite)

    def import_(self, path: str | os.PathLike[str], *, project: str | None = None) -> ImportReport:
        """Make a (DeerFlow) memory.json the memory, unchanged but for the facts it may not
        hold (``checked_facts``); returns how many facts it kept, and why not the rest.
        With ``project``, add its facts (and summary) to that project instead, as one
        change (rolled back as one), as many as memory has room for; returns how many
        facts were new to it, how many it already held, and why not the rest."""
        project = project_name(project) if project else None
        data = read_import(path)
        total = len(data.get("facts") or [])
        facts, rejected = checked_facts(data.get("facts") or [])
        data = {**data, "facts": facts}
        if project is not None:
            change = ChangeSet(
                origin="user",
                reason="import",
                source=str(path),
                diff=project_diff(data, project),
                project=project,
                threshold=0.0,  # a person's own facts: none dropped for its confidence
            )
            result = self.gate.submit(change).result
            known = len(result.ids("reinforce"))
            return ImportReport(len(result.ids("add")), total, known, rejected + result.left_out)
        self.gate.submit(ChangeSet(origin="user", reason="import", source=str(path), document=data))
        return ImportReport(len(facts), total, 0, rejected)

    read_import = staticmethod(read_import)

    def reset(self) -> None:
        """Empty memory (recorded as a version, so it can be rolled back)."""
        self.gate.submit(ChangeSet(origin="user", reason="reset", document=empty_memory()))
