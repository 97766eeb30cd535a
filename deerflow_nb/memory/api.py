"""``Memory``: the one object the agent, ``%memory``, the panel and the inspector use.

A narrow facade grouped by job (``groups.py``): ``facts``, ``review``, ``history``,
``threads``, ``projects``, ``team``, ``upkeep`` and ``transfer``, each a part with one job;
at the top level only what a turn needs (``preview``, ``injection``, ``apply``, ``flush``,
``status`` …) and DESIGN.md's names as aliases of the groups' methods. Opening a
``Memory`` opens its files (journal.db migrates), no thread, no write; ``start`` is what a
kernel does on loading memory: finish what a killed process left and start this home's
fold worker (without it, ``flush`` folds in the calling thread).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from ..config import HOME_ENV, HomeError, Settings, load_settings
from ..schema.diff import ExtractionDiff
from ..storage.journal import Journal
from .conversation import Conversation
from .facts import Facts
from .folding import fold_log, worker
from .folding.extraction import check_diff
from .folding.fold import Folding
from .groups import RECALL_K, Alias, Group, History, Reviewing, Threads
from .listeners import Listeners
from .reader import MemoryReader
from .reports import ApplyReport
from .retrieval.vectors import FactVectors
from .scopes import Scope, View, Views, asked
from .sharing import Sharing
from .store import MemoryStore
from .updates.gate import Gate
from .updates.project_admin import Projects
from .updates.review import Review
from .updates.rules import Rules
from .updates.transfer import Transfer
from .updates.upkeep import Upkeep
from .updates.write_protocol import Ledger

if TYPE_CHECKING:
    from .retrieval.ranking import Context

__all__ = ["DESIGN_ALIASES", "RECALL_K", "Memory"]


class Memory:
    """Long-term memory for one home folder (see docs/internals.md for the contract)."""

    facts = Group[Facts]()  # list, query, page, search, add, edit, forget, usage
    review = Group[Reviewing]()  # enabled, pending, approve, reject, items
    history = Group[History]()  # events, versions, diff, rollback, of(fact_id), lineage, folds
    threads = Group[Threads]()  # add, enqueue, skip, recall
    projects = Group[Projects]()  # list, facts, rename, forget
    team = Group[Sharing]()  # share, join, sync, start_sync, stop_sync, projects
    upkeep = Group[Upkeep]()  # stale, propose_stale, consolidate
    transfer = Group[Transfer]()  # export, import_, read_import, reset

    # DESIGN.md's public names that live in a group: the group's method, documented there.
    add_fact = Alias("facts", Facts.add)
    forget = Alias("facts", Facts.forget)
    search = Alias("facts", Facts.search)
    pending = Alias("review", MemoryReader.pending)
    pending_count = Alias("review", MemoryReader.pending_count)
    approve = Alias("review", Reviewing.approve)
    events = Alias("history", MemoryReader.events)
    versions = Alias("history", MemoryReader.versions)
    lineage = Alias("history", MemoryReader.lineage)
    rollback = Alias("history", History.rollback)
    recall = Alias("threads", Threads.recall)
    enqueue = Alias("threads", Threads.enqueue)
    add_messages = Alias("threads", Threads.add)
    share = Alias("team", Sharing.share)
    join = Alias("team", Sharing.join)
    sync = Alias("team", Sharing.sync)
    stale = Alias("upkeep", Upkeep.stale)
    propose_stale = Alias("upkeep", Upkeep.propose_stale)
    consolidate = Alias("upkeep", Upkeep.consolidate)
    export = Alias("transfer", Transfer.export)
    import_ = Alias("transfer", Transfer.import_)

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
        self.journal = journal = Journal(self.settings.journal_path)
        self.conversation = Conversation(journal)  # the one door for messages (writes)
        self.path = self.settings.memory_path
        self.store = MemoryStore(self.path)
        self._changed = changed = Listeners()
        self._callbacks = changed.callbacks
        self._vectors = vectors = FactVectors(self.settings, journal)
        self._views = Views()
        self._started = False
        self._start_lock = threading.Lock()
        self._ledger = ledger = Ledger(journal, self.store, changed)
        # The writer finishes what a killed writer left, once, as it opens: no read does.
        ledger.settle()
        # Every read goes through the read door, on this writer's connection (reader.py).
        self.reader = reader = MemoryReader(self.settings, self.store, lambda: self.journal.db)
        review = Review(self.settings, journal, ledger, changed)
        # The one door for every change (updates/gate.py): nothing below writes memory without it.
        gate = Gate(
            self.settings,
            journal,
            ledger,
            Rules(self.settings, journal),
            review,
            changed,
            vectors,
        )
        self._folding = folding = Folding(self.settings, journal, ledger, gate)
        embedder = lambda: vectors.embedder  # noqa: E731
        self._facts = Facts(self.settings, gate, journal, reader, self.view, embedder)
        self._review = Reviewing(review, reader, gate)
        self._history = History(reader, gate)
        self._threads = Threads(journal, self.conversation, folding, embedder)
        self._projects = Projects(journal, gate, reader)
        self._team = Sharing(self.settings, journal, gate, ledger, changed)
        self._upkeep = Upkeep(self.settings, ledger, review, gate)
        self._transfer = Transfer(self.settings, ledger, gate)
        self.flush = folding.flush  # DESIGN.md's mem.flush(timeout=None), folding's own
        self.on_change = changed.add  # the panel's refresh, team sync's nudge

    def start(self) -> Memory:
        """Load memory as a kernel does (idempotent, returns ``self``): mark the turns a
        killed process left ``running`` interrupted (its half-done change was finished as
        this ``Memory`` opened), queue threads journaled but never enqueued, and join this
        home's background fold worker (one per home per process; none when memory is
        disabled); ``close`` leaves."""
        if self._started:
            return self
        with self._start_lock:
            if not self._started:
                self.journal.interrupt_orphan_turns()
                if self.settings.memory.enabled:
                    self._folding.schedule_orphans()
                    self.threads.worker = worker.join(self._folding)
                self._started = True
        return self

    @property
    def data(self) -> dict[str, Any]:
        """memory.json, fresh from disk; the empty schema when the file is absent."""
        return self.reader.data

    @property
    def embedder(self) -> Any:
        """The dense embedder when ``memory.embeddings`` is set, else None (imported lazily)."""
        return self._vectors.embedder

    def view(self, scope: Scope) -> View:
        """The current revision as ``scope`` sees it (filtered before any ranking), read-only,
        named by its revision so ranking need not fingerprint it."""
        revision, data = self.reader.shared()
        return self._views.of(data, scope, revision)

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
        shared = self.view(asked(project))
        return inject(shared, budget, context, embedder=self.embedder)

    def preview(
        self, context: Context = None, max_tokens: int | None = None, *, project: str | None = None
    ) -> str:
        """Exactly the ``<memory>`` text the next turn would inject (in ``project``)."""
        return self.injection(context, max_tokens, project=project)[0]

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

    def status(self) -> dict[str, Any]:
        """Queue rows, the last fold (``{at, source, outcome, added, reinforced, removed,
        evicted, sections, left_out: [{item, reason, value}], held, pending_id, version,
        error}``), ``consecutive_failures`` of the memory model, the last error, paths."""
        status = self.reader.status()
        status["last_error"] = status["last_error"] or self._folding.last_error
        waiting = self._folding.waiting_for_user
        status["waiting_for_user"] = fold_log.waiting_line(status["pending"]) if waiting else "no"
        return status

    def close(self) -> None:
        """Leave this home's worker (the last one to leave stops it); queued rows stay
        durable in the journal."""
        if self.threads.worker is not None:
            worker.leave(self._folding)
            self.threads.worker = None
        self._started = False
        self.journal.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


GROUPS = tuple(name for name, value in vars(Memory).items() if isinstance(value, Group))
# DESIGN.md's names kept at the top level -> the group method each one is.
DESIGN_ALIASES = {name: a.target for name, a in vars(Memory).items() if isinstance(a, Alias)}
