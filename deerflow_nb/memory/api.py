"""``Memory``: the one object the agent, ``%memory``, the panel and the inspector use.

A facade over parts with one job each: ``ledger`` (the journal-first write protocol and
the history it leaves), ``edits`` (hand edits), ``folding`` (the fold queue and its model
call), ``review`` (pending changes), ``upkeep`` (staleness and consolidation) and
``transfer`` (export, import, reset).

Opening a ``Memory`` opens its files (journal.db migrates) and does nothing else: no
thread, no write. ``start`` is what a kernel does on loading memory (the notebook session
and ``Agent`` call it): finish what a killed process left and start this home's background
fold worker. Without it, the first read or write still finishes a half-applied change
first (``Ledger.settle``), and ``flush`` folds in the calling thread.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import HOME_ENV, HomeError, Settings, load_settings
from ..schema.diff import ExtractionDiff
from ..similarity import overlap
from ..storage import ledger as ledger_rows
from ..storage import queue as queue_rows
from ..storage.journal import Journal
from . import folds as fold_log
from . import queue, usage
from .edits import Edits
from .extraction import check_diff
from .folding import SAID_IN_ONE_LINE, Folding
from .ledger import Ledger
from .reports import ApplyReport, ConsolidationReport, FlushReport, StaleReport
from .review import Review, select
from .rules import Rules
from .store import MemoryFileError, MemoryStore
from .transfer import Transfer, read_import
from .upkeep import Upkeep

if TYPE_CHECKING:
    from .ranking import Context

log = logging.getLogger(__name__)
_UNSET = object()


class Memory:
    """Long-term memory for one home folder (see docs/internals.md for the contract)."""

    def __init__(
        self, home: str | os.PathLike[str] | None = None, *, settings: Settings | None = None
    ) -> None:
        self.settings = settings or load_settings(home)
        try:
            self.settings.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HomeError(
                f"cannot create the deerflow_nb home {self.settings.home} ({exc.strerror}); "
                f"point {HOME_ENV} (or --home) at a folder you can write to"
            ) from None
        self.journal = Journal(self.settings.journal_path)
        self.path = self.settings.memory_path
        self.store = MemoryStore(self.path)
        self._callbacks: list[Callable[..., Any]] = []
        self._embedder: Any = _UNSET
        self._started = False
        self._start_lock = threading.Lock()
        self._ledger = ledger = Ledger(self.journal, self.store, self._changed)
        rules = Rules(self.settings, self.journal)
        self._edits = Edits(self.settings, ledger, rules)
        parts = (self.settings, self.journal, ledger, rules)
        self._review = Review(*parts, self._changed, self._warm)
        self._folding = Folding(*parts, self._review, self._changed, self._warm)
        self._upkeep = Upkeep(self.settings, ledger, rules, self._review)
        self._transfer = Transfer(self.settings, ledger)

    def start(self) -> Memory:
        """Load memory as a kernel does; idempotent, returns ``self``.

        Finishes what a killed process left (a change journaled but not written, its temp
        files, turns it left ``running``), queues threads it journaled but never enqueued,
        and joins this home's background fold worker (one per home per process; none when
        memory is disabled). ``close`` leaves it again.
        """
        if self._started:
            return self
        with self._start_lock:
            if not self._started:
                self._ledger.settle()
                self.journal.interrupt_orphan_turns()
                self._folding.start_worker()
                self._started = True
        return self

    # -- reading ---------------------------------------------------------------------
    @property
    def data(self) -> dict[str, Any]:
        """memory.json, fresh from disk; the empty schema when the file is absent."""
        return self._ledger.current()

    def facts(
        self,
        category: str | None = None,
        min_confidence: float | None = None,
        sort: str = "confidence",
    ) -> list[dict[str, Any]]:
        """Facts filtered by category and confidence; sorted by confidence, ``created`` or none."""
        facts = [
            f
            for f in self.data.get("facts", [])
            if (category is None or f.get("category") == category)
            and (min_confidence is None or float(f.get("confidence", 0)) >= min_confidence)
        ]
        if sort == "confidence":
            facts.sort(key=lambda f: float(f.get("confidence", 0)), reverse=True)
        elif sort == "created":
            facts.sort(key=lambda f: str(f.get("createdAt", "")), reverse=True)
        return facts

    def forget_matching(self, text: str) -> list[dict[str, Any]]:
        """Facts a "forget …" request could mean: substring or most content words shared."""
        needle = " ".join(text.casefold().split())
        return [
            f
            for f in self.data.get("facts", [])
            if needle in f.get("content", "").casefold() or overlap(text, f["content"]) >= 0.6
        ]

    @property
    def embedder(self) -> Any:
        """The dense embedder when ``memory.embeddings`` is set, else None (imported lazily)."""
        if self._embedder is _UNSET:
            if self.settings.memory.embeddings:
                from .embeddings import get_embedder

                self._embedder = get_embedder(self.settings, self.journal)
            else:
                self._embedder = None
        return self._embedder

    def _warm(self, data: dict[str, Any]) -> None:
        """Compute fact (and word, for query expansion) embeddings at fold time, so the
        next turn's ranking is fast."""
        try:
            embedder = self.embedder
            if embedder is not None:
                from .terms import texts_to_embed

                embedder.warm(texts_to_embed([f["content"] for f in data.get("facts", [])]))
        except SAID_IN_ONE_LINE as exc:
            log.warning("could not compute fact embeddings: %s", exc)
        except Exception:
            log.warning("could not compute fact embeddings", exc_info=True)

    def _shared(self) -> dict[str, Any]:
        """The current revision, read-only, pinned so ranking need not fingerprint it."""
        from .fact_index import pin_revision

        revision, data = self._ledger.shared()
        if revision is not None:
            pin_revision(data, revision)
        return data

    def search(
        self, query: str, k: int = 10, *, relevant_only: bool = True
    ) -> list[tuple[dict[str, Any], float]]:
        """Facts relevant to ``query``, best first, with their scores; [] when nothing
        stored is (``relevance``). ``relevant_only=False``: the nearest ones anyway, for a
        "nearest miss" (not counted as use)."""
        from .injection import rank_facts

        shared = self._shared()
        results = rank_facts(shared, query, embedder=self.embedder, relevant_only=relevant_only)
        results = results[:k]
        if relevant_only and query and query.strip():  # a fact found by a search is in use
            self._record_use(lambda db: usage.record_used(db, [f.get("id") for f, _ in results]))
        return results

    def recall(
        self, query: str, k: int = 10, *, thread: str | None = None, relevant_only: bool = True
    ) -> list[dict[str, Any]]:
        """Journal search over lead threads' user messages and final replies, best first;
        each ``{"thread", "seq", "role", "content", "created_at", "score"}`` (``recall.py``);
        [] when nothing said matches. ``relevant_only=False``: the nearest ones anyway."""
        from .recall import search as recall_search

        return recall_search(
            self.journal,
            query,
            k,
            thread=thread,
            embedder=self.embedder,
            relevant_only=relevant_only,
        )

    def injection(
        self, context: Context = None, max_tokens: int | None = None
    ) -> tuple[str, list[dict[str, Any]]]:
        """The block the next turn injects and the facts it lists, ranked once."""
        from .injection import inject

        budget = self.settings.memory.max_injection_tokens if max_tokens is None else max_tokens
        return inject(self._shared(), budget, context, embedder=self.embedder)

    def record_injection(self, facts: list[dict[str, Any]], message: str) -> None:
        """Note one turn's injected facts (those sharing a word with ``message`` as used):
        one upsert in the journal, never a memory.json write; a failure is only logged."""
        if facts:
            self._record_use(lambda db: usage.record_injected(db, facts, message))

    def usage(self, fact_ids: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """``fact_id -> {last_injected, injected, last_used, used, last_confirmed,
        confirmed}`` (``usage.py``); facts never injected, used or confirmed have no row."""
        return usage.read(self.journal.db, fact_ids)

    def _record_use(self, write: Callable[[Any], Any]) -> None:
        try:
            with self.journal.transaction() as db:
                write(db)
        except Exception as exc:  # a busy or read-only journal must not break a turn
            log.warning("could not record fact use: %s", exc)

    def preview(self, context: Context = None, max_tokens: int | None = None) -> str:
        """Exactly the ``<memory>`` text the next turn would inject."""
        return self.injection(context, max_tokens)[0]

    def selected_facts(
        self, context: Context = None, max_tokens: int | None = None
    ) -> list[dict[str, Any]]:
        return self.injection(context, max_tokens)[1]

    # -- manual changes (edits.py) -----------------------------------------------------
    def add_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.9,
        source: str = "manual",
    ) -> dict[str, Any]:
        """Add a fact by hand (no threshold); a near-duplicate reinforces the stored one."""
        return self._edits.add_fact(content, category, confidence, source)

    def edit_fact(
        self,
        fact_id: str,
        content: str | None = None,
        *,
        category: str | None = None,
        confidence: float | None = None,
    ) -> dict[str, Any]:
        """Change a fact's text, category or confidence; KeyError if there is no such fact."""
        return self._edits.edit_fact(fact_id, content, category, confidence)

    def forget(self, fact_id: str) -> dict[str, Any]:
        """Really remove a fact (journaled); KeyError if there is no such fact."""
        return self.forget_many([fact_id])[0]

    def forget_many(self, fact_ids: list[str]) -> list[dict[str, Any]]:
        """Remove several facts as one change: all of them, or none if any id is unknown."""
        return self._edits.forget_many(fact_ids)

    # -- folding (folding.py) ----------------------------------------------------------
    def apply(self, diff: dict[str, Any] | ExtractionDiff, source: str = "manual") -> ApplyReport:
        """Apply one DeerFlow extraction diff exactly as a fold does (held back in review mode,
        and by the wipe guard), journaled with its report.

        Items are checked one by one: invalid ones are left out (``ApplyReport.left_out``)
        and the rest applies. Raises ``ExtractionError`` (a ValueError), changing nothing,
        only when ``diff`` is not a diff at all.
        """
        return self._folding.apply(check_diff(diff), source)

    def folds(self, limit: int = 20) -> list[dict[str, Any]]:
        """What the latest folds did, newest first (see ``memory.folds.decode``)."""
        return fold_log.recent(self.journal.db, limit)

    def enqueue(self, thread_id: str) -> bool:
        """Snapshot the journaled thread into ``memory_queue`` and restart the debounce.

        False (and nothing queued) when memory is disabled, the thread is a sub-agent's, or
        it lacks a user message and an assistant reply. Without ``start`` the row waits,
        durable, for a ``flush`` or a started ``Memory``.
        """
        return self._folding.enqueue(thread_id)

    def skip(self, thread_id: str) -> None:
        """Keep the thread's turns so far out of memory (memory disabled)."""
        self._folding.skip(thread_id)

    def flush(self, timeout: float | None = None) -> FlushReport:
        """Fold every pending thread now, failed ones included; returns what happened.

        Runs in the calling thread, with or without ``start``. ``timeout`` (seconds) bounds
        the whole flush, model calls and waiting for a background fold already running
        included; a thread it cuts short stays queued for the next fold. The fold uses this
        object's settings (its model, say), even when another ``Memory`` on the same home
        started the background worker. Folds nothing when memory is disabled.
        """
        return self._folding.flush(timeout)

    # -- memory over months (upkeep.py, aging.py) --------------------------------------
    def stale(self, now: Any = None, days: float | None = None) -> list[dict[str, Any]]:
        """Facts neither confirmed nor used for ``memory.staleness_days`` (``days``) × their age
        factor as of ``now`` (default: now), the longest idle first; each ``{id, content,
        category, idle_days, limit_days, last_active, reason}``. Nothing is removed."""
        return self._upkeep.stale(now, days)

    def propose_stale(self, now: Any = None, days: float | None = None) -> StaleReport:
        """Propose the stale facts for removal as one pending change (never removed without
        ``approve``); facts some pending stale proposal already names are not proposed again."""
        return self._upkeep.propose_stale(now, days)

    def consolidate(self) -> ConsolidationReport:
        """Ask the memory model to merge related facts (``aging.CONSOLIDATE_PROMPT``; the
        offline model merges near-duplicates). In review mode the merges wait as one pending
        change; otherwise they apply as one version (undo with ``rollback``). Each merged
        fact's ``add`` event names its sources (``merged_from``): see ``lineage``."""
        return self._upkeep.consolidate()

    def lineage(self, fact_id: str) -> list[dict[str, Any]]:
        """The history of ``fact_id`` and, through consolidations, of every fact merged into
        it (``merged_from``), oldest first."""
        return self._ledger.lineage(fact_id)

    # -- review mode (review.py) -------------------------------------------------------
    @property
    def review(self) -> bool:
        """When true, folds become proposals in ``pending()`` that wait for approval."""
        return self._review.on

    @review.setter
    def review(self, value: bool) -> None:
        self._review.on = value

    def pending_count(self) -> int:
        """How many proposals wait for approval (without reading their diffs)."""
        return self._review.count()

    def pending(self) -> list[dict[str, Any]]:
        return self._review.pending()

    def approve(self, ids: list[int] | str) -> int:
        """Apply proposals (oldest first) as folds; returns how many were applied.

        Each is checked again under the memory lock: one another kernel decided meanwhile
        is skipped, not applied twice.
        """
        return self._review.approve(select(self.pending(), ids))

    def reject(self, ids: list[int] | str) -> int:
        """Drop proposals; returns how many (one another kernel decided meanwhile is not)."""
        return self._review.reject(select(self.pending(), ids))

    # -- whole-memory operations (transfer.py) -----------------------------------------
    def export(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write memory as an indented memory.json at ``path``; returns the path.

        Never overwrites the home's own files, nor (unless ``overwrite``) any existing file.
        """
        return self._transfer.export(path, overwrite=overwrite)

    @staticmethod
    def read_import(path: str | os.PathLike[str]) -> dict[str, Any]:
        """The memory document at ``path``, checked; ValueError says why it cannot be imported."""
        return read_import(path)

    def import_(self, path: str | os.PathLike[str]) -> int:
        """Make a (DeerFlow) memory.json the memory, unchanged; returns its fact count."""
        return self._transfer.import_(path)

    def reset(self) -> None:
        """Empty memory (recorded as a version, so it can be rolled back)."""
        self._transfer.reset()

    # -- history (ledger.py) -----------------------------------------------------------
    def events(self, limit: int = 50, fact_id: str | None = None) -> list[dict[str, Any]]:
        """``memory_events``, newest first."""
        return self._ledger.events(limit, fact_id)

    def history(self, fact_id: str) -> list[dict[str, Any]]:
        """How one fact came, changed and went, oldest first."""
        return self._ledger.history(fact_id)

    def versions(self) -> list[dict[str, Any]]:
        """Every recorded state, oldest first, without the snapshots themselves."""
        return self._ledger.versions()

    def version(self, v: int) -> dict[str, Any]:
        """The memory.json snapshot recorded as version ``v``; KeyError if unknown."""
        return self._ledger.version(v)

    def diff(self, v1: int, v2: int | None = None) -> dict[str, Any]:
        """Facts added, removed and changed from version ``v1`` to ``v2`` (default: now)."""
        return self._ledger.diff(v1, v2)

    def rollback(self, v: int) -> None:
        """Restore version ``v`` as a new change (history is kept, nothing is rewritten)."""
        self._ledger.rollback(v)

    def recover(self) -> int:
        """Rebuild memory.json from the journal's last version (after corruption); its id."""
        return self._ledger.rebuild()

    # -- status and plumbing -----------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Queue rows, the last fold (``{at, source, outcome, added, reinforced, removed,
        evicted, sections, left_out: [{item, reason, value}], held, pending_id, version,
        error}``), ``consecutive_failures`` of the memory model, the last error, paths."""
        rows = queue.status_rows(self.journal)
        try:
            fact_count: int | None = len(self._ledger.shared()[1].get("facts", []))
            memory_error = None
        except MemoryFileError as exc:
            fact_count, memory_error = None, str(exc)
        errors = [r["last_error"] for r in rows if r.get("last_error")]
        return {
            "enabled": self.settings.memory.enabled,
            "review": self.review,
            "memory_path": str(self.path),
            "journal_path": str(self.journal.path),
            "fact_count": fact_count,
            "memory_error": memory_error,
            "pending": rows,
            "pending_changes": self._review.count(),
            "last_fold": self._last_fold(),
            "consecutive_failures": fold_log.consecutive_failures(self.journal.db),
            "last_error": errors[-1] if errors else self._folding.last_error,
        }

    def _last_fold(self) -> dict[str, Any] | None:
        """The newest fold's record; for folds journaled before ``memory_folds`` existed,
        only when the last one ran (a fold that changed nothing counts too)."""
        recent = fold_log.recent(self.journal.db, 1)
        if recent:
            return recent[0]
        marks = [
            queue_rows.last_folded_at(self.journal.db),
            ledger_rows.last_version_at(self.journal.db, ("fold", "approve")),
        ]
        at = max((m for m in marks if m), default=None)
        return {"at": at} if at else None

    def on_change(self, callback: Callable[..., Any]) -> Callable[[], None]:
        """Call ``callback`` after every change, from whichever thread made it; returns a
        function that unsubscribes it.

        A callback that takes an argument gets a small dict (reason, version, source).
        """
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return unsubscribe

    def _changed(self, info: dict[str, Any]) -> None:
        for callback in list(self._callbacks):
            try:
                if _takes_argument(callback):
                    callback(info)
                else:
                    callback()
            except Exception:
                log.warning("memory on_change callback %r failed", callback, exc_info=True)

    def close(self) -> None:
        """Leave this home's worker (the last one to leave stops it); queued rows stay
        durable in the journal."""
        self._folding.stop_worker()
        self._started = False
        self.journal.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _takes_argument(callback: Callable[..., Any]) -> bool:
    with contextlib.suppress(TypeError, ValueError):
        params = inspect.signature(callback).parameters.values()
        return any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
            and p.default is p.empty
            for p in params
        )
    return False
