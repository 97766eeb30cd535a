"""The journal-first write protocol for memory.json, and the history it leaves.

Only the gate (``gate.py``) records changes (``reading`` then ``recording``, both context
managers: the caller's code runs in their bodies, no function is handed down). Every
change (fold, manual edit, forget, rollback, import, reset, approval) is one unit: under
the memory.json lock, re-read the file (unless it is unchanged since it was parsed),
compute, write the new file aside
(fsynced, its name too), record one ``memory_versions`` row and its ``memory_events`` —
with whatever the caller journals alongside (a fold's record and its queue row's end) —
in a single journal transaction, then rename the file into place. So two kernels never
lose each other's changes, and any past state can be shown, diffed and restored. A whole
replacement (import, reset, rollback) first journals a memory.json edited by hand since the
newest version as a version of its own, so it too can be restored.

A fold opens two journal transactions in all: its claim, and this one. The file's
rename needs none after it: a writer killed between the journal's commit and the rename
leaves the temp file, whose document is the newest journaled version, and the next
``settle`` (or commit) renames that version into place; a temp holding anything else was
never journaled and is deleted. (Journals from before this protocol marked each version
``written = 0`` until the rename; such a version is still rolled forward.)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ...scrub import encodable_deep
from ...storage import ledger as rows
from ...storage.db import now_iso
from ...storage.journal import Journal
from ..readside import version_rebuild
from ..readside.change_events import replacement_events
from ..store import MemoryFileError, MemoryStore, empty_memory, quiet_gc
from . import fact_use as usage
from . import versions
from .events import event_rows
from .updater import UpdateResult

Changed = Callable[[dict[str, Any]], None]


@dataclass
class Commit:
    """One change under way, as the ledger hands it to its caller: the document read under
    the lock, then the version recorded (None: nothing changed) and the listeners' news."""

    current: dict[str, Any]
    version: int | None = None
    news: dict[str, Any] | None = None
    readable: bool = True  # False: memory.json did not parse (kept aside, read as empty)


class Ledger:
    """Writes memory.json only through ``reading`` and ``recording``, journal first; reads
    its history."""

    def __init__(self, journal: Journal, store: MemoryStore, changed: Changed) -> None:
        self.journal = journal
        self.store = store
        self._changed = changed
        self._latest: tuple[int, dict[str, Any]] | None = None  # the newest version, known
        self._settled = False
        self._settle_lock = threading.Lock()

    # -- after a crash -------------------------------------------------------------------
    def settle(self) -> None:
        """Before this ledger's first read or write: finish what a process killed mid-change
        left. A version journaled but not written is written (the journal is the truth: the
        file would otherwise show a state its history says was replaced), and half-written
        temp files are deleted. On a home no crash touched, nothing is written."""
        if self._settled:
            return
        with self._settle_lock:
            if self._settled:
                return
            if self.unwritten() is not None or self.store.stale_temps():
                with self.store.locked():
                    self._roll_forward()
            self._settled = True

    def current(self) -> dict[str, Any]:
        """memory.json, fresh from disk (a private copy)."""
        self.settle()
        return self.store.read()

    def shared(self) -> tuple[tuple[Any, ...] | None, dict[str, Any]]:
        """memory.json's current revision and its shared, read-only document."""
        self.settle()
        return self.store.read_shared()

    def unwritten(self) -> int | None:
        """The id of a version a crash left journaled but not written, if any."""
        return rows.unwritten_version(self.journal.db)

    def _roll_forward(self) -> None:
        """Under the store lock: finish a change a killed writer journaled but did not
        rename into place, so memory.json matches the journal; delete its temp files."""
        version = self.unwritten()  # a journal from before: the version says so itself
        if version is not None:
            self.store.write(version_rebuild.read(self.journal.db, version))
            self._mark_written()
        temps = self.store.stale_temps()
        newest = rows.newest_version(self.journal.db) if temps else None
        if newest is not None:
            journaled = version_rebuild.read(self.journal.db, newest)
            if any(self.store.holds(t, journaled) for t in temps) and not self.store.holds(
                self.store.path, journaled
            ):
                self.store.write(journaled)
        if temps:
            self.store.remove_stale_temps()

    def _mark_written(self) -> None:
        with self.journal.transaction() as db:
            rows.mark_written(db)

    # -- the one write path --------------------------------------------------------------
    @contextlib.contextmanager
    def reading(self, *, private: bool = True, tolerant: bool = False) -> Iterator[Commit]:
        """Hold memory.json's lock for one change: the caller computes its result from
        ``Commit.current`` (the document as of now) and records it with ``recording``, both
        in the body; the listeners are told once the lock is let go.

        ``private=False``: the caller leaves the document as it is, so it may be the one
        shared with readers (not read again when the file has not changed). ``tolerant``: a
        memory.json that does not parse reads as empty (a replacement of the whole file).
        """
        self.settle()
        commit = Commit({})
        with self.store.locked(), quiet_gc():  # the document is acyclic: see quiet_gc
            self._roll_forward()
            try:
                commit.current = self.store.current(private=private)
            except MemoryFileError:
                if not tolerant:
                    raise
                commit.current = empty_memory()  # the bad copy is already kept aside
                commit.readable = False
            yield commit
        if commit.news is not None:
            self._changed(commit.news)

    @contextlib.contextmanager
    def recording(
        self,
        commit: Commit,
        reason: str,
        source: str,
        result: UpdateResult,
        *,
        always: bool = False,
        whole: bool = False,
    ) -> Iterator[Any]:
        """Inside ``reading``: write ``result``'s file aside, then journal its version and
        events, and whatever the caller journals in the body on the connection this yields,
        in one transaction; then rename the file into place (``always``: even when nothing
        changed). ``commit.version`` is the version made (None: nothing changed).

        ``whole``: ``result`` replaces the whole document (import, reset, rollback), so it
        is written always, and a memory.json edited by hand since the newest version is
        first journaled as a version of its own (``_keep_hand_edit``): a rollback brings
        it back.

        The journal goes first: a crash before the rename leaves the temp file of the
        newest journaled version, which the next change (or load) renames into place, not
        a memory.json change with no history that a re-fold would then apply again.
        """
        changed = bool(result.events) or always or whole
        # The new file is written (not yet renamed) before anything is journaled: a full
        # disk or a read-only folder fails here, with nothing to roll forward later.
        tmp = None
        if changed:
            tmp, result.data = self.store.prepare(result.data)  # the document as written
        try:
            with self.journal.transaction() as db:
                if whole and commit.readable:
                    self._keep_hand_edit(db, commit.current)
                if changed:
                    commit.version = self._record(db, reason, source, result, commit.current)
                yield db
        except BaseException:
            if tmp is not None:
                self.store.discard(tmp)
            self._latest = None
            raise
        if tmp is not None:
            self.store.install(tmp)
            self.store.adopt(result.data)
        if changed:
            commit.news = {"reason": reason, "version": commit.version, "source": source}

    def _keep_hand_edit(self, db: Any, current: dict[str, Any]) -> None:
        """Before a whole replacement: journal ``current`` (memory.json as read under the
        lock) as a full version when no version holds it (someone edited the file by hand),
        with an event per fact it changed; otherwise the replacement would drop the edit
        with no copy. Only whole replacements pay for the comparison, never folds."""
        newest = rows.newest_version(db)
        if newest is None:
            journaled = empty_memory()
        elif self._latest is not None and self._latest[0] == newest:
            journaled = self._latest[1]
        else:
            journaled = version_rebuild.read(db, newest)
        if journaled == current:
            return
        events = replacement_events(journaled, current, versions.HAND_EDIT)
        if newest is None and not events:  # no file yet, or one as empty as a new memory
            return
        self._record(
            db, versions.HAND_EDIT, "memory.json", UpdateResult(current, events), journaled
        )

    def _record(
        self, db: Any, reason: str, source: str, result: UpdateResult, before: dict[str, Any]
    ) -> int:
        """Journal one change: its version (a delta, or a full snapshot now and then) and
        its events, each naming whose fact it is (``before``: the document it changed);
        the version id."""
        stamp = now_iso()
        version = versions.record(
            db,
            result.data,
            reason=reason,
            source=source,
            created_at=stamp,
            previous=self._latest,
        )
        self._latest = (version, result.data)
        journaled = event_rows(result.events, stamp, source, version, before, result.data)
        rows.insert_events(db, [encodable_deep(row) for row in journaled])
        # The user said a fact again (a fold reinforced it) or edited it: a confirmation.
        confirmed = [
            e.fact_id
            for e in result.events
            if e.fact_id and (e.kind == "reinforce" or (e.kind == "update" and reason == "edit"))
        ]
        usage.record_confirmed(db, confirmed, stamp)
        usage.settle(db)  # the log counted in (inherit reads fact_usage) and kept short
        for event in result.events:
            if event.kind == "add" and event.details.get("merged_from") and event.fact_id:
                usage.inherit(db, event.fact_id, list(event.details["merged_from"]))
        return version
