"""``Memory``: the one object the agent, ``%memory``, the panel and the inspector use.

A facade over parts with one job each: ``ledger`` (the journal-first write protocol and its
history), ``edits``, ``folding``, ``review``, ``upkeep`` and ``transfer``. Opening a
``Memory`` opens its files (journal.db migrates), no thread, no write; ``start`` is what a
kernel does on loading memory: finish what a killed process left and start this home's
fold worker (without it, ``flush`` folds in the calling thread).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import HOME_ENV, HomeError, Settings, load_settings
from ..projects import project_name
from ..schema.changes import ChangeSet
from ..schema.diff import ExtractionDiff
from ..storage.journal import Journal
from .conversation import Conversation
from .fact_query import FactQuery
from .folding import fold_log, worker
from .folding.extraction import check_diff
from .folding.fold import Folding
from .listeners import Listeners
from .reader import MemoryReader
from .readside.review_items import ReviewItem
from .reports import ApplyReport, ConsolidationReport, FlushReport, StaleReport
from .retrieval.vectors import FactVectors
from .scopes import ALL_PROJECTS, Scope, Snapshot, Views, asked
from .sharing import Sharing, TeamMemory
from .store import MemoryStore
from .updates import fact_use as usage
from .updates.edits import Edits
from .updates.gate import Gate
from .updates.project_admin import Projects
from .updates.review import Review, select
from .updates.rules import Rules
from .updates.transfer import ImportReport, Transfer, read_import
from .updates.upkeep import Upkeep
from .updates.write_protocol import Ledger

if TYPE_CHECKING:
    from .retrieval.ranking import Context

log = logging.getLogger(__name__)
RECALL_K = 10  # messages a recall lists by default (%memory recall, the panel, the inspector)


class Memory(TeamMemory):
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
        self.conversation = Conversation(self.journal)  # the one door for messages (writes)
        self.path = self.settings.memory_path
        self.store = MemoryStore(self.path)
        self._changed = Listeners()
        self._callbacks = self._changed.callbacks
        self._vectors = FactVectors(self.settings, self.journal)
        self._views = Views()
        self._started = False
        self._start_lock = threading.Lock()
        self._ledger = ledger = Ledger(self.journal, self.store, self._changed)
        # Every read goes through the read door, on this writer's connection (reader.py).
        self.reader = MemoryReader(
            self.settings, self.store, lambda: self.journal.db, before=ledger.settle
        )
        rules = Rules(self.settings, self.journal)
        self._review = review = Review(self.settings, self.journal, ledger, self._changed)
        # The one door for every change (updates/gate.py): nothing below writes memory without it.
        self._gate = gate = Gate(
            self.settings,
            self.journal,
            ledger,
            rules,
            lambda: review.on,
            self._changed,
            self._vectors.warm,
        )
        self._edits = Edits(self.settings, gate)
        self._folding = Folding(self.settings, self.journal, ledger, gate)
        self._worker: worker.FoldWorker | None = None  # joined by ``start``
        self._upkeep = Upkeep(self.settings, ledger, review, gate)
        self._transfer = Transfer(self.settings, ledger, gate)
        self.projects = Projects(self.journal, gate, lambda: self.data)  # list, rename, forget
        self._sharing = Sharing(self.settings, self.journal, gate, ledger.current)  # team

    def start(self) -> Memory:
        """Load memory as a kernel does (idempotent, returns ``self``): finish what a killed
        process left (a change journaled but not written, temp files, ``running`` turns),
        queue threads journaled but never enqueued, and join this home's background fold
        worker (one per home per process; none when memory is disabled); ``close`` leaves."""
        if self._started:
            return self
        with self._start_lock:
            if not self._started:
                self._ledger.settle()
                self.journal.interrupt_orphan_turns()
                if self.settings.memory.enabled:
                    self._folding.schedule_orphans()
                    self._worker = worker.join(self._folding)
                self._started = True
        return self

    # -- reading -----------------------------------------------------------------------
    @property
    def data(self) -> dict[str, Any]:
        """memory.json, fresh from disk; the empty schema when the file is absent."""
        return self.reader.data

    def facts(
        self,
        category: str | None = None,
        min_confidence: float | None = None,
        sort: str = "confidence",
        *,
        scope: Scope = ALL_PROJECTS,
    ) -> list[dict[str, Any]]:
        """The facts ``scope`` sees, filtered by category and confidence; sorted by
        confidence, ``created`` or none."""
        return self.reader.facts(category, min_confidence, sort, scope=scope)

    def forget_matching(self, text: str) -> list[dict[str, Any]]:
        """Facts a "forget …" request could mean: substring or most content words shared."""
        return self.reader.query(FactQuery(like=text, sort="none"))

    def query(self, query: FactQuery) -> list[dict[str, Any]]:
        """The facts ``query`` selects (filter, sort, page), for ``%memory facts`` and views."""
        return self.reader.query(query)

    def query_page(self, query: FactQuery) -> tuple[list[dict[str, Any]], int]:
        """``query``'s page and how many facts it matched in all (to say "10 of 35")."""
        return self.reader.query_page(query)

    @property
    def embedder(self) -> Any:
        """The dense embedder when ``memory.embeddings`` is set, else None (imported lazily)."""
        return self._vectors.embedder

    def snapshot(self, scope: Scope) -> Snapshot:
        """The current revision as ``scope`` sees it (filtered before any ranking), read-only,
        named by its revision so ranking need not fingerprint it."""
        revision, data = self.reader.shared()
        return self._views.of(data, scope, revision)

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        project: str | None = None,
        everywhere: bool = False,
        relevant_only: bool = True,
    ) -> list[tuple[dict[str, Any], float]]:
        """Facts relevant to ``query`` (``relevance``), best first, scored: the user's and
        ``project``'s (or ``everywhere``); ``relevant_only=False``: the nearest anyway."""
        from .retrieval.injection import rank_facts

        shared = self.snapshot(asked(project, everywhere))
        results = rank_facts(shared, query, embedder=self.embedder, relevant_only=relevant_only)
        results = results[:k]
        if relevant_only and query and query.strip():  # a fact found by a search is in use
            self._record_use(lambda db: usage.record_used(db, [f.get("id") for f, _ in results]))
        return results

    def recall(
        self,
        query: str,
        k: int = RECALL_K,
        *,
        thread: str | None = None,
        project: str | None = None,
        everywhere: bool = False,
        relevant_only: bool = True,
    ) -> list[dict[str, Any]]:
        """Journal search over lead threads' user messages and final replies, best first,
        each ``{"thread", "seq", "role", "content", "created_at", "score", "project"}``,
        in ``project``'s threads unless ``everywhere`` (``retrieval/recall.py``, ``relevance``)."""
        from .retrieval.project_recall import recall_in

        scope = asked(project, everywhere)
        return recall_in(
            self.journal, query, k, thread, scope, self.embedder, relevant_only=relevant_only
        )

    def injection(
        self,
        context: Context = None,
        max_tokens: int | None = None,
        *,
        project: str | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        """The block the next turn in ``project`` injects and the facts it lists, ranked
        once: the user's facts and ``project``'s (None: the user's only, what a turn outside
        any project sees) under one budget, no other's."""
        from .retrieval.injection import inject

        budget = self.settings.memory.max_injection_tokens if max_tokens is None else max_tokens
        shared = self.snapshot(asked(project))
        return inject(shared, budget, context, embedder=self.embedder)

    def record_injection(self, facts: list[dict[str, Any]], message: str) -> None:
        """Note one turn's injected facts (those sharing a word with ``message`` as used):
        one upsert in the journal, never a memory.json write; a failure is only logged."""
        if facts:
            self._record_use(lambda db: usage.record_injected(db, facts, message))

    def usage(self, fact_ids: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """``fact_id -> {last_injected, injected, last_used, used, last_confirmed,
        confirmed}`` (``updates/fact_use.py``); a fact never injected, used or confirmed has
        no row."""
        return self.reader.usage(fact_ids)

    def _record_use(self, write: Callable[[Any], Any]) -> None:
        try:
            with self.journal.transaction() as db:
                write(db)
        except Exception as exc:  # a busy or read-only journal must not break a turn
            log.warning("could not record fact use: %s", exc)

    def preview(
        self, context: Context = None, max_tokens: int | None = None, *, project: str | None = None
    ) -> str:
        """Exactly the ``<memory>`` text the next turn would inject (in ``project``)."""
        return self.injection(context, max_tokens, project=project)[0]

    def selected_facts(
        self, context: Context = None, max_tokens: int | None = None, *, project: str | None = None
    ) -> list[dict[str, Any]]:
        return self.injection(context, max_tokens, project=project)[1]

    # -- manual changes (updates/edits.py) ---------------------------------------------
    def add_fact(
        self,
        content: str,
        category: str | None = "context",
        confidence: float = 0.9,
        source: str = "manual",
        *,
        origin: str = "user",
        turn: str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """Add a fact by hand (no threshold); a near-duplicate reinforces the stored one, and
        with ``category=None`` it is read from the text (``%memory add`` without one). With
        ``project`` the fact is that project's, else the user's (shared by every project).

        ``origin="model"`` (with the agent ``turn``) is the model's ``remember`` when no user
        message asked: stored as its suggestion (``addedBy: "model"``), capped per turn,
        never evicting a fact the user added; in review mode it waits (the returned dict
        then has ``pending_id`` and no ``id``). ``Refused`` (a ValueError) says why not."""
        return self._edits.add_fact(
            content, category, confidence, source, origin=origin, turn=turn, project=project
        )

    def edit_fact(
        self,
        fact_id: str,
        content: str | None = None,
        *,
        category: str | None = None,
        confidence: float | None = None,
        scope: str | None = None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """Change a fact's text, category, confidence or scope (``"user"``, or
        ``"project"`` with ``project``: a move); KeyError if there is no such fact."""
        return self._edits.edit_fact(fact_id, content, category, confidence, scope, project)

    def forget(self, fact_id: str) -> dict[str, Any]:
        """Really remove a fact (journaled); KeyError if there is no such fact."""
        return self.forget_many([fact_id])[0]

    def forget_many(self, fact_ids: list[str]) -> list[dict[str, Any]]:
        """Remove several facts as one change: all of them, or none if any id is unknown."""
        return self._edits.forget_many(fact_ids)

    def forget_outside(self, fact_ids: list[str], source: str = "outside") -> dict[str, Any]:
        """An outside agent's removal: waits for review by default (``Edits.forget_outside``)."""
        return self._edits.forget_outside(fact_ids, source)

    # -- folding (folding/) ------------------------------------------------------------
    def apply(
        self,
        diff: dict[str, Any] | ExtractionDiff,
        source: str = "manual",
        *,
        project: str | None = None,
    ) -> ApplyReport:
        """Apply one DeerFlow extraction diff exactly as a fold does (held back in review mode,
        and by the wipe guard), journaled with its report; ``project`` (default ``default``)
        takes its items labelled ``scope: project``.

        Items are checked one by one: invalid ones are left out (``ApplyReport.left_out``)
        and the rest applies. Raises ``ExtractionError`` (a ValueError), changing nothing,
        only when ``diff`` is not a diff at all.
        """
        return self._folding.apply(check_diff(diff), source, project=project)

    def folds(self, limit: int = 20) -> list[dict[str, Any]]:
        """What the latest folds did, newest first (see ``folding.fold_log.decode``)."""
        return self.reader.folds(limit)

    def enqueue(self, thread_id: str) -> bool:
        """Snapshot the journaled thread into ``memory_queue`` and restart the debounce;
        False (nothing queued) when memory is disabled, the thread is a sub-agent's, or it
        lacks a user message and a reply. Without ``start`` the row waits, durable."""
        queued = self._folding.enqueue(thread_id)
        if queued and self._worker is not None:
            self._worker.notify()
        return queued

    def add_messages(
        self, thread: str, messages: Iterable[dict[str, Any]], project: str | None = None
    ) -> str:
        """Journal ``messages`` in ``project``'s thread ``thread``, queue its fold; its id."""
        thread_id = self.conversation.add(thread, messages, project)
        self.enqueue(thread_id)
        return thread_id

    def skip(self, thread_id: str) -> None:
        """Keep the thread's turns so far out of memory (memory disabled)."""
        self._folding.skip(thread_id)

    def flush(self, timeout: float | None = None) -> FlushReport:
        """Fold every pending thread now (failed ones too) in the calling thread, started or
        not; what happened. ``timeout`` (seconds) bounds it all: a thread cut short stays
        queued; one another kernel folds is waited for (folded here if that kernel dies). It
        uses this object's settings (its model), whoever started the worker; memory off: none."""
        return self._folding.flush(timeout)

    # -- memory over months (updates/upkeep.py, aging.py) ------------------------------
    def stale(self, now: Any = None, days: float | None = None) -> list[dict[str, Any]]:
        """Facts neither confirmed nor used for ``memory.staleness_days`` (``days``) × their age
        factor as of ``now`` (default: now), the longest idle first; each ``{id, content,
        category, idle_days, limit_days, last_active, reason}`` (an unused project's: +project)."""
        return self._upkeep.stale(now, days)

    def propose_stale(self, now: Any = None, days: float | None = None) -> StaleReport:
        """Propose the stale facts for removal as one pending change, each unused project's as
        one more (``report.projects``); never removed without ``approve``, never proposed twice."""
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
        return self.reader.lineage(fact_id)

    # -- review mode (updates/review.py) -----------------------------------------------
    @property
    def review(self) -> bool:
        """When true, folds become proposals in ``pending()`` that wait for approval."""
        return self.reader.review

    @review.setter
    def review(self, value: bool) -> None:
        self._review.on = value

    def pending_count(self) -> int:
        """How many proposals wait for approval (without reading their diffs)."""
        return self.reader.pending_count()

    def pending(self) -> list[dict[str, Any]]:
        """The proposals waiting for approval, oldest first, each with its ``diff``."""
        return self.reader.pending()

    def approve(self, ids: list[int] | str) -> int:
        """Apply proposals (oldest first) as the user's; how many (one another kernel decided
        meanwhile is skipped, not applied twice)."""
        return self._review.approve(select(self.pending(), ids), self._gate)

    def reject(self, ids: list[int] | str) -> int:
        """Drop proposals; returns how many (one another kernel decided meanwhile is not)."""
        return self._review.reject(select(self.pending(), ids))

    def review_items(self, change: dict[str, Any]) -> list[ReviewItem]:
        """A ``pending()`` change item by item, with full texts and the numbers below."""
        return self.reader.review_items(change)

    def approve_items(self, change_id: int, numbers: Iterable[int]) -> int:
        """Apply items ``numbers`` of a pending change, the rest waiting (same id, numbers)."""
        return self._review.decide_items(change_id, numbers, "approve", self._gate)

    def reject_items(self, change_id: int, numbers: Iterable[int]) -> int:
        """Drop only items ``numbers`` of a pending change (see ``approve_items``)."""
        return self._review.decide_items(change_id, numbers, "reject", self._gate)

    # -- whole-memory operations (updates/transfer.py) ---------------------------------
    def export(
        self, path: str | os.PathLike[str], *, overwrite: bool = False, project: str | None = None
    ) -> Path:
        """Write memory (only ``project``'s facts and summary, with it) as an indented
        memory.json at ``path`` (never over the home's own files, nor, unless
        ``overwrite``, any existing file); returns the path."""
        return self._transfer.export(path, overwrite=overwrite, project=project)

    @staticmethod
    def read_import(path: str | os.PathLike[str]) -> dict[str, Any]:
        """The memory document at ``path``, checked; ValueError says why it cannot be imported."""
        return read_import(path)

    def import_(self, path: str | os.PathLike[str], *, project: str | None = None) -> ImportReport:
        """Make a (DeerFlow) memory.json the memory, unchanged; returns how many facts it
        kept (an int) and why not the rest (a confidence outside 0-1, no text). With
        ``project``: add its facts to that project (one change, as many as memory has room
        for); returns how many were new, how many known, and why not the rest."""
        return self._transfer.import_(path, project=project_name(project) if project else None)

    def reset(self) -> None:
        """Empty memory (recorded as a version, so it can be rolled back)."""
        self._transfer.reset()

    # -- history (updates/write_protocol.py) -------------------------------------------
    def events(self, limit: int = 50, fact_id: str | None = None) -> list[dict[str, Any]]:
        """``memory_events``, newest first."""
        return self.reader.events(limit, fact_id)

    def history(self, fact_id: str) -> list[dict[str, Any]]:
        """How one fact came, changed and went, oldest first."""
        return self.reader.history(fact_id)

    def versions(self) -> list[dict[str, Any]]:
        """Every recorded state, oldest first, without the snapshots themselves."""
        return self.reader.versions()

    def version(self, v: int) -> dict[str, Any]:
        """The memory.json snapshot recorded as version ``v``; KeyError if unknown."""
        return self.reader.version(v)

    def diff(self, v1: int, v2: int | None = None) -> dict[str, Any]:
        """Facts added, removed and changed from version ``v1`` to ``v2`` (default: now)."""
        return self.reader.diff(v1, v2)

    def rollback(self, v: int) -> None:
        """Restore version ``v`` as a new change (history is kept, nothing is rewritten)."""
        document = self.reader.version(v)
        self._gate.submit(
            ChangeSet(origin="user", reason="rollback", source=f"version {v}", document=document)
        )

    def recover(self) -> int:
        """Rebuild memory.json from the journal's last version (after corruption); its id."""
        newest = self.reader.newest()
        self.rollback(newest)
        return newest

    # -- status and plumbing -----------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Queue rows, the last fold (``{at, source, outcome, added, reinforced, removed,
        evicted, sections, left_out: [{item, reason, value}], held, pending_id, version,
        error}``), ``consecutive_failures`` of the memory model, the last error, paths."""
        status = self.reader.status()
        status["last_error"] = status["last_error"] or self._folding.last_error
        waiting = self._folding.waiting_for_user
        status["waiting_for_user"] = fold_log.waiting_line(status["pending"]) if waiting else "no"
        return status

    def on_change(self, callback: Callable[..., Any]) -> Callable[[], None]:
        """Call ``callback`` after every change, from whichever thread made it (with a small
        dict: reason, version, source, if it takes one); returns a function that unsubscribes it."""
        return self._changed.add(callback)

    def close(self) -> None:
        """Leave this home's worker (the last one to leave stops it); queued rows stay
        durable in the journal."""
        if self._worker is not None:
            worker.leave(self._folding)
            self._worker = None
        self._started = False
        self.journal.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
