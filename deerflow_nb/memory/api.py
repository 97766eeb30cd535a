"""``Memory``: the one object the agent, ``%memory``, the panel and the inspector use.

Every change (fold, manual edit, forget, rollback, import, reset, approval) is one unit:
under the memory.json lock, re-read the file, compute, write it atomically, then record
one ``memory_versions`` snapshot and its ``memory_events`` in a single journal
transaction. So two kernels never lose each other's changes, and any past state can be
shown, diffed and restored.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import (
    CONFIG_FILENAME,
    HOME_ENV,
    ConfigError,
    HomeError,
    Settings,
    load_settings,
)
from ..llm.base import ModelError
from ..schema.constants import ADDED_BY_USER
from ..schema.diff import ExtractionDiff
from ..scrub import encodable_deep, redact
from ..similarity import overlap
from ..storage.db import now_iso
from ..storage.journal import Journal, row_to_message
from . import folds as fold_log
from . import queue, usage, versions
from .events import decode_event, event_row, replacement_events
from .extraction import ExtractionError, build_messages, check_diff, parse
from .filter import filter_messages, is_foldable
from .store import (
    CATEGORIES,
    MemoryFileError,
    MemoryStore,
    check_schema,
    empty_memory,
    encodable_document,
    loads_document,
)
from .updater import (
    Event,
    GuardedFold,
    UpdateResult,
    apply_diff,
    guard_fold,
    sanitize_text,
    scrub_summaries,
)

if TYPE_CHECKING:
    from .ranking import Context

log = logging.getLogger(__name__)
# Failures whose message already says what went wrong and how to fix it: logged as that
# one line, where a traceback would bury it (an unreachable server's runs ~100 lines).
_SAID_IN_ONE_LINE = (ModelError, ConfigError)
_UNSET = object()
_REVIEW_KEY = "review"
MAX_IMPORT_BYTES = 20 * 1024 * 1024  # a memory.json to import may be at most 20 MB


@dataclass
class ApplyReport:
    """What one diff (a fold, or ``Memory.apply``) did.

    ``left_out`` lists the items not applied, each ``{item, reason, value}`` (invalid in
    the reply, below the confidence threshold, over the per-fold limit, unknown removal);
    ``held`` what waits for review as pending change ``pending_id`` (review mode, the wipe
    guard, removals of facts the user added). ``outcome`` says it in words.
    """

    version: int | None = None
    added: list[str] = field(default_factory=list)
    reinforced: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    pending_id: int | None = None
    left_out: list[dict[str, str]] = field(default_factory=list)
    held: list[dict[str, str]] = field(default_factory=list)
    outcome: str = fold_log.NOTHING

    @classmethod
    def from_result(cls, result: UpdateResult, version: int | None) -> ApplyReport:
        return cls(
            version=version,
            added=result.ids("add"),
            reinforced=result.ids("reinforce"),
            removed=result.ids("remove"),
            evicted=result.ids("evict"),
            sections=[e.section for e in result.events if e.kind == "section" and e.section],
            ignored=result.ignored_removals,
            left_out=list(result.left_out),
        )

    @property
    def held_all(self) -> bool:
        """Nothing applied: the whole diff waits for review."""
        return self.outcome == fold_log.HELD

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "version": self.version,
            "pending_id": self.pending_id,
            **{k: list(getattr(self, k)) for k in fold_log.REPORT_KEYS},
        }


def changes_anything(diff: dict[str, Any]) -> bool:
    """Whether a (checked) diff would change memory: a new fact, a removal, or a section
    marked for update. One that would not is no proposal to review."""
    if diff.get("newFacts") or diff.get("factsToRemove"):
        return True
    return any(
        isinstance(section, dict) and section.get("shouldUpdate")
        for group in ("user", "history")
        for section in (diff.get(group) or {}).values()
    )


@dataclass
class StaleReport:
    """``Memory.propose_stale``: the stale facts found, those proposed now as pending change
    ``pending_id``, and those an earlier stale proposal already holds."""

    stale: list[dict[str, Any]] = field(default_factory=list)
    proposed: list[str] = field(default_factory=list)
    already_pending: list[str] = field(default_factory=list)
    pending_id: int | None = None


@dataclass
class ConsolidationReport:
    """``Memory.consolidate``: the merges the model proposed (``{"from": [ids], "content",
    "category", "confidence"}``), what was left out, and either the version that applied
    them (``merged``: the new facts) or the pending change that holds them."""

    merges: list[dict[str, Any]] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[dict[str, str]] = field(default_factory=list)
    version: int | None = None
    pending_id: int | None = None


@dataclass
class FlushReport:
    """Threads folded, proposed for review, failed (with the error), and rows left pending."""

    folded: list[str] = field(default_factory=list)
    proposed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    pending: int = 0


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
        self._last_error: str | None = None
        self._worker: queue.QueueWorker | None = None
        self._latest: tuple[int, dict[str, Any]] | None = None  # the newest version, known
        try:
            self._recover_on_load()
        except BaseException:
            self.journal.close()
            raise
        if self.settings.memory.enabled:
            self._schedule_orphans()
            self._worker = queue.acquire(self.settings.home, self)
            self._worker.notify()

    def _recover_on_load(self) -> None:
        """Clean up after a process killed mid-work: roll a change journaled but not
        written forward, delete its half-written temp files, and mark the turns it left
        ``running`` as interrupted."""
        self.journal.interrupt_orphan_turns()
        stale = self._unwritten() is not None or any(
            self.path.parent.glob(self.store.target.name + ".*.tmp")
        )
        if stale:
            with self.store.locked():
                self.store.remove_stale_temps()
                self._roll_forward()

    # -- reading ---------------------------------------------------------------------
    @property
    def data(self) -> dict[str, Any]:
        """memory.json, fresh from disk; the empty schema when the file is absent."""
        return self.store.read()

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

    def _shared(self) -> dict[str, Any]:
        """The current revision, read-only, pinned so ranking need not fingerprint it."""
        from .fact_index import pin_revision

        revision, data = self.store.read_shared()
        if revision is not None:
            pin_revision(data, revision)
        return data

    def search(self, query: str, k: int = 10) -> list[tuple[dict[str, Any], float]]:
        from .injection import rank_facts

        results = rank_facts(self._shared(), query, embedder=self.embedder)[:k]
        if query and query.strip():  # a fact found by a search is a fact in use
            self._record_use(lambda db: usage.record_used(db, [f.get("id") for f, _ in results]))
        return results

    def recall(self, query: str, k: int = 10, *, thread: str | None = None) -> list[dict[str, Any]]:
        """Journal search over lead threads' user messages and final replies, best first;
        each ``{"thread", "seq", "role", "content", "created_at", "score"}`` (``recall.py``)."""
        from .recall import search as recall_search

        return recall_search(self.journal, query, k, thread=thread, embedder=self.embedder)

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

    # -- manual changes ----------------------------------------------------------------
    def add_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.9,
        source: str = "manual",
    ) -> dict[str, Any]:
        """Add a fact by hand (no threshold); a near-duplicate reinforces the stored one."""
        if category not in CATEGORIES:
            raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
        if not 0 <= confidence <= 1:
            raise ValueError(f"confidence must be from 0 to 1, got {confidence!r}")
        if not sanitize_text(content):
            raise ValueError("a fact needs some text")
        diff = {"newFacts": [{"content": content, "category": category, "confidence": confidence}]}

        def mutate(data: dict[str, Any]) -> UpdateResult:
            result = self._apply_rules(data, diff, source, threshold=0.0, added_by=ADDED_BY_USER)
            if set(result.ids("add")) & set(result.ids("evict")):  # refused before writing
                raise ValueError(
                    f"memory is full (memory.max_facts is {self.settings.memory.max_facts}) "
                    f"and every fact is more confident than {confidence:g}; raise the "
                    "confidence, forget a fact, or raise memory.max_facts"
                )
            return result

        result, _ = self._commit("add", source, mutate)
        fact_id = next(e.fact_id for e in result.events if e.kind in ("add", "reinforce"))
        return copy.deepcopy(self._find(result.data, fact_id) or {"id": fact_id})

    def edit_fact(
        self,
        fact_id: str,
        content: str | None = None,
        *,
        category: str | None = None,
        confidence: float | None = None,
    ) -> dict[str, Any]:
        """Change a fact's text, category or confidence; KeyError if there is no such fact.

        A new text also drops the summary sentences that restate the old one, as forgetting
        does: otherwise the profile would go on telling the model what the user corrected.
        """
        if category is not None and category not in CATEGORIES:
            raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
        if confidence is not None and not 0 <= confidence <= 1:
            raise ValueError(f"confidence must be from 0 to 1, got {confidence!r}")
        text = None if content is None else sanitize_text(content)
        if text == "":
            raise ValueError("a fact needs some text; to remove it, forget it")

        def mutate(data: dict[str, Any]) -> UpdateResult:
            fact = self._find(data, fact_id)
            if fact is None:
                raise KeyError(fact_id)
            old_content, old_conf = fact["content"], fact.get("confidence")
            if text is not None:
                fact["content"] = text
            if category is not None:
                fact["category"] = category
            if confidence is not None:
                fact["confidence"] = float(confidence)
            fact["updatedAt"] = now_iso()
            event = Event(
                "update",
                fact_id,
                None,
                old_content,
                fact["content"],
                old_conf,
                fact.get("confidence"),
                {"category": fact.get("category")},
            )
            events = [event]
            if text is not None and text != old_content:  # the profile must not keep the old text
                events += scrub_summaries(data, [old_content], skip=set(), now=fact["updatedAt"])
            return UpdateResult(data, events)

        result, _ = self._commit("edit", "manual", mutate)
        return copy.deepcopy(self._find(result.data, fact_id) or {})

    def forget(self, fact_id: str) -> dict[str, Any]:
        """Really remove a fact (journaled); KeyError if there is no such fact."""
        return self.forget_many([fact_id])[0]

    def forget_many(self, fact_ids: list[str]) -> list[dict[str, Any]]:
        """Remove several facts as one change: all of them, or none if any id is unknown."""
        removed: list[dict[str, Any]] = []

        def mutate(data: dict[str, Any]) -> UpdateResult:
            removed.clear()
            for fact_id in fact_ids:
                fact = self._find(data, fact_id)
                if fact is None:
                    raise KeyError(fact_id)
                removed.append(copy.deepcopy(fact))
            return self._apply_rules(data, {"factsToRemove": list(fact_ids)}, "manual")

        self._commit("forget", "manual", mutate)
        return removed

    # -- folding -------------------------------------------------------------------------
    def apply(self, diff: dict[str, Any] | ExtractionDiff, source: str = "manual") -> ApplyReport:
        """Apply one DeerFlow extraction diff exactly as a fold does (held back in review mode,
        and by the wipe guard), journaled with its report.

        Items are checked one by one: invalid ones are left out (``ApplyReport.left_out``)
        and the rest applies. Raises ``ExtractionError`` (a ValueError), changing nothing,
        only when ``diff`` is not a diff at all.
        """
        return self._apply(check_diff(diff), source)

    def _apply(
        self, diff: ExtractionDiff, source: str, finish: Callable[[Any], None] | None = None
    ) -> ApplyReport:
        left_out = [item.to_dict() for item in diff.left_out]
        clean = diff.to_dict()
        if self.review and not changes_anything(clean):
            # Nothing to review: no pending entry to approve, only the fold's record.
            report = ApplyReport(left_out=fold_log.bounded(left_out), outcome=fold_log.NOTHING)
            with self.journal.transaction() as db:
                self._record_fold(db, source, report)
                if finish:
                    finish(db)
            return report
        if self.review:
            with self.journal.transaction() as db:
                pending_id = self._propose(db, source, clean)
                report = ApplyReport(
                    pending_id=pending_id,
                    left_out=fold_log.bounded(left_out),
                    held=[{"item": "the whole fold", "reason": "review mode is on", "value": ""}],
                    outcome=fold_log.HELD,
                )
                self._record_fold(db, source, report)
                if finish:
                    finish(db)
            self._changed({"reason": "proposed", "pending_id": pending_id})
            return report
        guarded: list[GuardedFold] = []
        reports: list[ApplyReport] = []

        def mutate(data: dict[str, Any]) -> UpdateResult:
            guarded[:] = [guard_fold(data, clean, lambda d: self._apply_rules(data, d, source))]
            return guarded[0].result

        def finish_fold(db: Any) -> None:
            outcome = guarded[0]
            result = outcome.result
            version = None
            if result.events:  # journaled just now, in this transaction, under the lock
                version = db.execute("SELECT MAX(id) FROM memory_versions").fetchone()[0]
            report = ApplyReport.from_result(result, version)
            report.left_out = left_out + report.left_out
            report.left_out += [
                {"item": "factsToRemove", "reason": "names no stored fact", "value": i}
                for i in result.ignored_removals
            ]
            if outcome.held_diff:
                report.pending_id = self._propose(db, source, outcome.held_diff)
                report.held = outcome.held
            report.left_out = fold_log.bounded(report.left_out)
            report.outcome = fold_log.outcome_of(
                report.to_dict(), version=version, held_all=outcome.held_all
            )
            self._record_fold(db, source, report)
            reports.append(report)
            if finish:
                finish(db)

        result, _ = self._commit("fold", source, mutate, finish_fold)
        if reports[0].pending_id is not None:
            self._changed({"reason": "proposed", "pending_id": reports[0].pending_id})
        if result.events:
            self._warm(result.data)
        return reports[0]

    @staticmethod
    def _propose(db: Any, source: str, diff: dict[str, Any]) -> int:
        """Inside a journal transaction: store ``diff`` as a pending change; its id."""
        return (
            db["pending_changes"]
            .insert(
                {
                    "created_at": now_iso(),
                    "source": source,
                    "diff": json.dumps(diff, ensure_ascii=False),
                    "status": "pending",
                }
            )
            .last_pk
        )

    @staticmethod
    def _record_fold(db: Any, source: str, report: ApplyReport) -> None:
        fold_log.record(
            db,
            source=source,
            outcome=report.outcome,
            report=report.to_dict(),
            version=report.version,
            pending_id=report.pending_id,
        )

    def folds(self, limit: int = 20) -> list[dict[str, Any]]:
        """What the latest folds did, newest first (see ``memory.folds.decode``)."""
        return fold_log.recent(self.journal.db, limit)

    def _apply_rules(
        self,
        data: dict[str, Any],
        diff: dict[str, Any],
        source: str,
        threshold: float | None = None,
        added_by: str | None = None,
    ) -> UpdateResult:
        memory = self.settings.memory
        return apply_diff(
            data,
            diff,
            source=source,
            threshold=memory.fact_confidence_threshold if threshold is None else threshold,
            max_facts=memory.max_facts,
            added_by=added_by,
            eviction=memory.eviction,
            usage=lambda: usage.read(self.journal.db),
        )

    def enqueue(self, thread_id: str) -> bool:
        """Snapshot the journaled thread into ``memory_queue`` and restart the debounce.

        False (and nothing queued) when memory is disabled, the thread is a sub-agent's, or
        it lacks a user message and an assistant reply.
        """
        thread = self.journal.thread(thread_id)
        if thread is None or thread.get("kind") == "subagent":
            return False
        if not self.settings.memory.enabled:
            self.skip(thread_id)
            return False
        if not self._queue_unfolded(thread_id, self.settings.memory.debounce_seconds):
            return False
        if self._worker is not None:
            self._worker.notify()
        return True

    def skip(self, thread_id: str) -> None:
        """Keep the thread's turns so far out of memory (memory disabled).

        Turns already queued stay queued; only what was journaled since is passed over.
        (A ``--no-memory`` turn is journaled as private instead, which no fold reads.)
        """
        with self.journal.transaction() as db:  # checked and marked with no enqueue between
            if not queue.is_queued(self.journal, thread_id):
                queue.mark_folded(db, thread_id, self.journal.last_seq(thread_id))

    def _queue_unfolded(self, thread_id: str, debounce: float) -> bool:
        """Queue what the thread has not folded yet, read and written in one transaction
        (so a fold finishing meanwhile cannot leave a stale snapshot); False if unfoldable."""
        with self.journal.transaction() as db:
            snapshot, last_seq = self._unfolded(thread_id)
            if not is_foldable(snapshot):
                return False
            queue.upsert(db, thread_id, snapshot, last_seq, debounce)
        return True

    def _finish_fold(self, db: Any, row: dict[str, Any]) -> None:
        """Inside the fold's transaction: mark the row folded; a snapshot queued during the
        fold is cut to the turns after it, so none is folded twice."""
        if queue.finish(db, row):
            snapshot, last_seq = self._unfolded(row["thread_id"])
            queue.replace_snapshot(
                db, row["thread_id"], snapshot if is_foldable(snapshot) else None, last_seq
            )

    def _unfolded(self, thread_id: str) -> tuple[list[dict[str, Any]], int]:
        """The filtered messages journaled after the thread's last fold, private turns
        left out, and the last seq (private turns included, so a fold passes them).

        A fold reads only what it has not folded before, so a fact the user forgot with
        ``%memory forget`` is not learned again from the turn that first stated it.
        """
        rows = self.journal.message_rows(thread_id, after_seq=self._folded_seq(thread_id))
        last_seq = max((r["seq"] for r in rows), default=0)
        private = self.journal.private_turn_ids(thread_id)
        kept = [row_to_message(r) for r in rows if r["turn_id"] not in private]
        return filter_messages(kept), last_seq

    def _folded_seq(self, thread_id: str) -> int:
        row = self.journal.db.execute(
            "SELECT folded_seq FROM memory_threads WHERE thread_id = ?", [thread_id]
        ).fetchone()
        return int(row[0]) if row and row[0] else 0

    def flush(self, timeout: float | None = None) -> FlushReport:
        """Fold every pending thread now, failed ones included; returns what happened.

        ``timeout`` (seconds) bounds the whole flush, model calls and waiting for a background
        fold already running included; a thread it cuts short stays queued for the next fold.
        The fold uses this object's settings (its model, say), even when another ``Memory``
        on the same home started the background worker.
        """
        report = None if self._worker is None else self._worker.fold(True, timeout, self)
        return report or FlushReport(pending=self.journal.db["memory_queue"].count)

    def _fold_pending(self, force: bool, deadline: float | None) -> FlushReport:
        """Called by the worker under its fold lock: claim and fold the due rows."""
        report = FlushReport()
        for thread_id in queue.queued_threads(self.journal):
            if deadline is not None and time.monotonic() > deadline:
                break
            claimed = queue.claim(self.journal, thread_id, force=force)
            if claimed is not None:
                self._fold_row(claimed, report, deadline)
        report.pending = self.journal.db["memory_queue"].count
        return report

    def _fold_row(self, row: dict[str, Any], report: FlushReport, deadline: float | None) -> None:
        thread_id = row["thread_id"]
        try:
            conversation = json.loads(row["snapshot"])
            messages, handles = build_messages(self.store.read_shared()[1], conversation)
            from ..llm import get_chat_model

            model = get_chat_model(self._settings_until(deadline), self.settings.memory_model_name)
            reply = model.chat(messages, json_mode=True)
            diff = parse(reply.content, handles)
            outcome = self._apply(diff, thread_id, lambda db: self._finish_fold(db, row))
        except Exception as exc:  # any failure keeps the row for a bounded retry
            if isinstance(exc, _SAID_IN_ONE_LINE):
                log.warning("memory fold of %s failed: %s", thread_id, exc)
            elif not isinstance(exc, ExtractionError | MemoryFileError):  # shown by status
                log.warning("memory fold of %s failed", thread_id, exc_info=True)
            error = redact(f"{type(exc).__name__}: {exc}", self._secrets())
            self._last_error = error
            report.failed[thread_id] = error
            queue.fail(self.journal, row, error)
            with contextlib.suppress(Exception), self.journal.transaction() as db:
                fold_log.record(db, source=thread_id, outcome=fold_log.FAILED, error=error)
            return
        except BaseException:  # Ctrl-C mid-fold: hand the row back now, not when the lease ends
            queue.release(self.journal, row)
            raise
        (report.proposed if outcome.held_all else report.folded).append(thread_id)

    def _secrets(self) -> list[str | None]:
        """The configured keys, never to be shown or stored."""
        return [self.settings.model.api_key, os.environ.get("OPENAI_API_KEY")]

    def _settings_until(self, deadline: float | None) -> Settings:
        """The settings, with a flush deadline bounding the model call: one try, timing out
        when the deadline passes (retries and the full timeout could outlast it many times)."""
        if deadline is None:
            return self.settings
        left = max(deadline - time.monotonic(), 0.001)
        model = self.settings.model
        bounded = replace(model, timeout_seconds=min(model.timeout_seconds, left), max_retries=0)
        return replace(self.settings, model=bounded)

    def _schedule_orphans(self) -> None:
        """Queue lead threads journaled past their last fold but never enqueued (a crash
        between journaling a turn and enqueuing it); they fold without waiting."""
        rows = self.journal.db.execute(
            """
            SELECT t.id FROM threads t JOIN messages m ON m.thread_id = t.id
            LEFT JOIN memory_threads f ON f.thread_id = t.id
            WHERE COALESCE(t.kind, 'lead') != 'subagent'
              AND t.id NOT IN (SELECT thread_id FROM memory_queue)
            GROUP BY t.id HAVING MAX(m.seq) > COALESCE(MAX(f.folded_seq), 0)
            """
        ).fetchall()
        for (thread_id,) in rows:
            self._queue_unfolded(thread_id, 0.0)

    def _warm(self, data: dict[str, Any]) -> None:
        """Compute fact (and word, for query expansion) embeddings at fold time, so the
        next turn's ranking is fast."""
        try:
            embedder = self.embedder
            if embedder is not None:
                from .terms import texts_to_embed

                embedder.warm(texts_to_embed([f["content"] for f in data.get("facts", [])]))
        except _SAID_IN_ONE_LINE as exc:
            log.warning("could not compute fact embeddings: %s", exc)
        except Exception:
            log.warning("could not compute fact embeddings", exc_info=True)

    # -- the one write path ----------------------------------------------------------------
    def _commit(
        self,
        reason: str,
        source: str,
        mutate: Callable[[dict[str, Any]], UpdateResult],
        finish: Callable[[Any], None] | None = None,
        *,
        always: bool = False,
        read: Callable[[], dict[str, Any]] | None = None,
    ) -> tuple[UpdateResult, int | None]:
        """Lock, re-read, compute, journal the version and events, then write memory.json.

        The journal goes first, with the version marked unwritten until the file is in
        place: a crash in between leaves a version that the next change (or load) writes,
        not a memory.json change with no history that a re-fold would then apply again.
        """
        with self.store.locked():
            self._roll_forward()
            current = (read or self.store.read)()
            result = mutate(current)
            changed = bool(result.events) or always
            version = None
            # The new file is written (not yet renamed) before anything is journaled: a full
            # disk or a read-only folder fails here, with nothing to roll forward later.
            tmp = None
            if changed:
                result.data = encodable_document(result.data)
                tmp = self.store.prepare(result.data)
            try:
                if changed or finish:
                    with self.journal.transaction() as db:
                        if changed:
                            version = self._record(db, reason, source, result)
                        if finish:
                            finish(db)
            except BaseException:
                if tmp is not None:
                    self.store.discard(tmp)
                self._latest = None
                raise
            if tmp is not None:
                self.store.install(tmp)
                self._mark_written()
        if changed:
            self._changed({"reason": reason, "version": version, "source": source})
        return result, version

    def _record(self, db: Any, reason: str, source: str, result: UpdateResult) -> int:
        """Journal one change: its version (a delta, or a full snapshot now and then) and
        its events; the version id."""
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
        db["memory_events"].insert_all(
            [encodable_deep(event_row(e, stamp, source, version)) for e in result.events]
        )
        # The user said a fact again (a fold reinforced it) or edited it: a confirmation.
        confirmed = [
            e.fact_id
            for e in result.events
            if e.fact_id and (e.kind == "reinforce" or (e.kind == "update" and reason == "edit"))
        ]
        usage.record_confirmed(db, confirmed, stamp)
        for event in result.events:
            if event.kind == "add" and event.details.get("merged_from") and event.fact_id:
                usage.inherit(db, event.fact_id, list(event.details["merged_from"]))
        return version

    def _unwritten(self) -> int | None:
        """The id of a version a crash left journaled but not written, if any."""
        row = self.journal.db.execute(
            "SELECT id FROM memory_versions WHERE written = 0 ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else int(row[0])

    def _roll_forward(self) -> None:
        """Under the store lock: write that version, so memory.json matches the journal."""
        version = self._unwritten()
        if version is not None:
            self.store.write(versions.read(self.journal.db, version))
            self._mark_written()

    def _mark_written(self) -> None:
        with self.journal.transaction() as db:
            db.execute("UPDATE memory_versions SET written = 1 WHERE written = 0")

    def _replace(self, new: dict[str, Any], reason: str, source: str) -> int | None:
        """Make ``new`` the memory (rollback, import, reset), one event per changed fact."""

        def read_tolerant() -> dict[str, Any]:
            try:
                return self.store.read()
            except MemoryFileError:  # the bad copy is already kept aside
                return empty_memory()

        def mutate(old: dict[str, Any]) -> UpdateResult:
            return UpdateResult(copy.deepcopy(new), replacement_events(old, new, reason))

        _, version = self._commit(reason, source, mutate, always=True, read=read_tolerant)
        return version

    # -- history -----------------------------------------------------------------------------
    def events(self, limit: int = 50, fact_id: str | None = None) -> list[dict[str, Any]]:
        """``memory_events``, newest first."""
        where, args = ("fact_id = ?", [fact_id]) if fact_id else (None, None)
        rows = self.journal.db["memory_events"].rows_where(
            where, args, order_by="id desc", limit=limit
        )
        return [decode_event(r) for r in rows]

    def history(self, fact_id: str) -> list[dict[str, Any]]:
        """How one fact came, changed and went, oldest first."""
        rows = self.journal.db["memory_events"].rows_where("fact_id = ?", [fact_id], order_by="id")
        return [decode_event(r) for r in rows]

    def versions(self) -> list[dict[str, Any]]:
        """Every recorded state, oldest first, without the snapshots themselves."""
        return list(
            self.journal.db["memory_versions"].rows_where(
                select="id, created_at, reason, source, fact_count", order_by="id"
            )
        )

    def version(self, v: int) -> dict[str, Any]:
        """The memory.json snapshot recorded as version ``v``; KeyError if unknown."""
        return versions.read(self.journal.db, v)

    def diff(self, v1: int, v2: int | None = None) -> dict[str, Any]:
        """Facts added, removed and changed from version ``v1`` to ``v2`` (default: now)."""
        old = self.version(v1)
        new = self.data if v2 is None else self.version(v2)
        events = replacement_events(old, new, "diff")
        old_by_id = {f.get("id"): f for f in old.get("facts", [])}
        new_by_id = {f.get("id"): f for f in new.get("facts", [])}
        return {
            "from": v1,
            "to": v2,
            "added": [new_by_id[e.fact_id] for e in events if e.details.get("change") == "add"],
            "removed": [
                old_by_id[e.fact_id] for e in events if e.details.get("change") == "remove"
            ],
            "changed": [
                {"id": e.fact_id, "old": old_by_id[e.fact_id], "new": new_by_id[e.fact_id]}
                for e in events
                if e.details.get("change") == "update"
            ],
            "sections": {
                e.section: {"old": e.old_content, "new": e.new_content} for e in events if e.section
            },
        }

    def rollback(self, v: int) -> None:
        """Restore version ``v`` as a new change (history is kept, nothing is rewritten)."""
        snapshot = self.version(v)
        self._replace(snapshot, "rollback", f"version {v}")

    def recover(self) -> int:
        """Rebuild memory.json from the journal's last version (after corruption); its id."""
        rows = list(
            self.journal.db["memory_versions"].rows_where(select="id", order_by="id desc", limit=1)
        )
        if not rows:
            raise LookupError(
                f"journal {self.journal.path} holds no memory version to restore; to start "
                f"empty, delete {self.path} (or run %memory reset --yes)"
            )
        self.rollback(rows[0]["id"])
        return rows[0]["id"]

    # -- memory over months (issue 20; aging.py) ----------------------------------------------
    def stale(self, now: Any = None, days: float | None = None) -> list[dict[str, Any]]:
        """Facts neither confirmed nor used for ``memory.staleness_days`` (``days``) × their age
        factor as of ``now`` (default: now), the longest idle first; each ``{id, content,
        category, idle_days, limit_days, last_active, reason}``. Nothing is removed."""
        from .aging import stale_facts

        limit = self.settings.memory.staleness_days if days is None else days
        data = self.store.read_shared()[1]
        ids = [str(f.get("id")) for f in data.get("facts", [])]
        return [s.to_dict() for s in stale_facts(data, self.usage(ids), days=limit, now=now)]

    def propose_stale(self, now: Any = None, days: float | None = None) -> StaleReport:
        """Propose the stale facts for removal as one pending change (never removed without
        ``approve``); facts some pending stale proposal already names are not proposed again."""
        found = self.stale(now, days)
        waiting = {
            str(i)
            for change in self.pending()
            if change["diff"].get("stale")
            for i in change["diff"].get("factsToRemove", [])
        }
        fresh = [s for s in found if s["id"] not in waiting]
        report = StaleReport(
            stale=found, already_pending=sorted(waiting & {s["id"] for s in found})
        )
        if fresh:
            diff = {
                "factsToRemove": [s["id"] for s in fresh],
                "stale": [
                    {"id": s["id"], "content": s["content"], "reason": s["reason"]} for s in fresh
                ],
            }
            with self.journal.transaction() as db:
                report.pending_id = self._propose(db, "stale", diff)
            report.proposed = [s["id"] for s in fresh]
            self._changed({"reason": "proposed", "pending_id": report.pending_id})
        return report

    def consolidate(self) -> ConsolidationReport:
        """Ask the memory model to merge related facts (``aging.CONSOLIDATE_PROMPT``; the
        offline model merges near-duplicates). In review mode the merges wait as one pending
        change; otherwise they apply as one version (undo with ``rollback``). Each merged
        fact's ``add`` event names its sources (``merged_from``): see ``lineage``."""
        from ..llm import get_chat_model
        from .aging import consolidation_messages, parse_merges
        from .extraction import load_reply

        data = self.store.read_shared()[1]
        report = ConsolidationReport()
        if len(data.get("facts") or []) < 2:
            return report
        messages, handles = consolidation_messages(data)
        model = get_chat_model(self.settings, self.settings.memory_model_name)
        reply = model.chat(messages, json_mode=True)
        raw, _ = load_reply(reply.content)
        merges, report.left_out = parse_merges(raw, handles, data)
        if not merges:
            return report
        diff = {"merges": merges}
        report.merges = merges
        if self.review:
            with self.journal.transaction() as db:
                report.pending_id = self._propose(db, "consolidate", diff)
            self._changed({"reason": "proposed", "pending_id": report.pending_id})
            return report
        result, report.version = self._commit(
            "consolidate", "consolidate", lambda d: self._apply_rules(d, diff, "consolidate")
        )
        report.left_out += result.left_out
        report.merged = [
            {"id": e.fact_id, "content": e.new_content, "from": e.details["merged_from"]}
            for e in result.events
            if e.kind == "add" and e.details.get("merged_from")
        ]
        return report

    def lineage(self, fact_id: str) -> list[dict[str, Any]]:
        """The history of ``fact_id`` and, through consolidations, of every fact merged into
        it (``merged_from``), oldest first."""
        seen: set[str] = set()
        todo = [fact_id]
        rows: list[dict[str, Any]] = []
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for event in self.history(current):
                rows.append(event)
                if event["kind"] == "add":
                    todo.extend(event["details"].get("merged_from") or [])
        rows.sort(key=lambda e: e["id"])
        return rows

    # -- review mode --------------------------------------------------------------------------
    @property
    def review(self) -> bool:
        """When true, folds become proposals in ``pending()`` that wait for approval."""
        rows = list(self.journal.db["memory_settings"].rows_where("key = ?", [_REVIEW_KEY]))
        return rows[0]["value"] == "1" if rows else self.settings.memory.review

    @review.setter
    def review(self, value: bool) -> None:
        with self.journal.transaction() as db:
            db["memory_settings"].upsert(
                {"key": _REVIEW_KEY, "value": "1" if value else "0"}, pk="key"
            )

    def pending_count(self) -> int:
        """How many proposals wait for approval (without reading their diffs)."""
        return int(self.journal.db["pending_changes"].count_where("status = 'pending'"))

    def pending(self) -> list[dict[str, Any]]:
        rows = self.journal.db["pending_changes"].rows_where("status = 'pending'", order_by="id")
        return [{**r, "diff": json.loads(r["diff"])} for r in rows]

    def approve(self, ids: list[int] | str) -> int:
        """Apply proposals (oldest first) as folds; returns how many were applied.

        Each is checked again under the memory lock: one another kernel decided meanwhile
        is skipped, not applied twice.
        """
        return sum(self._approve_one(change) for change in self._select_pending(ids))

    def _approve_one(self, change: dict[str, Any]) -> bool:
        change_id, diff, source = change["id"], change["diff"], change["source"]
        still: list[bool] = []

        def apply(data: dict[str, Any]) -> UpdateResult:
            still.append(self._is_pending(change_id))  # under the lock, decided nowhere else
            return self._apply_rules(data, diff, source) if still[0] else UpdateResult(data, [])

        def mark(db: Any) -> None:
            if still[0]:
                db["pending_changes"].update(
                    change_id, {"status": "approved", "decided_at": now_iso()}
                )

        result, _ = self._commit("approve", source, apply, mark)
        if still[0]:
            self._warm(result.data)
        return still[0]

    def reject(self, ids: list[int] | str) -> int:
        """Drop proposals; returns how many (one another kernel decided meanwhile is not)."""
        chosen = self._select_pending(ids)
        with self.store.locked(), self.journal.transaction() as db:
            count = sum(
                db.execute(
                    "UPDATE pending_changes SET status = 'rejected', decided_at = ? "
                    "WHERE id = ? AND status = 'pending'",
                    [now_iso(), change["id"]],
                ).rowcount
                for change in chosen
            )
        if count:
            self._changed({"reason": "reject"})
        return count

    def _is_pending(self, change_id: int) -> bool:
        sql = "SELECT status FROM pending_changes WHERE id = ?"
        row = self.journal.db.execute(sql, [change_id]).fetchone()
        return row is not None and row[0] == "pending"

    def _select_pending(self, ids: list[int] | str) -> list[dict[str, Any]]:
        pending = self.pending()
        if ids == "all":
            return pending
        wanted = {int(i) for i in ids}
        return [p for p in pending if p["id"] in wanted]

    # -- whole-memory operations ---------------------------------------------------------------
    def export(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write memory as an indented memory.json at ``path``; returns the path.

        Never overwrites the home's own files, nor (unless ``overwrite``) any existing file:
        a mistyped path must not destroy the journal or another export.
        """
        target = Path(path)
        own = {self.path, self.settings.journal_path, self.settings.home / CONFIG_FILENAME}
        if target.resolve() in {p.resolve() for p in own}:
            raise ValueError(f"{target} is this memory's own file; export to another path")
        if target.is_dir():
            raise ValueError(
                f"{target} is a folder; give a file path, say {target / 'memory.json'}"
            )
        if target.exists() and not overwrite:
            raise ValueError(f"{target} exists; choose another path, or overwrite it with --force")
        text = json.dumps(self.data, indent=2, ensure_ascii=False)
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot write {target}: {exc.strerror or exc}") from None
        return target

    @staticmethod
    def read_import(path: str | os.PathLike[str]) -> dict[str, Any]:
        """The memory document at ``path``, checked; ValueError says why it cannot be imported."""
        source = Path(path)
        try:
            size = source.stat().st_size
            if size > MAX_IMPORT_BYTES:
                raise ValueError(
                    f"{source}: cannot import, it is {size / 2**20:.1f} MB and an import may "
                    f"be at most {MAX_IMPORT_BYTES // 2**20} MB; remove facts from it first"
                )
            data = loads_document(source.read_bytes())
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

    def import_(self, path: str | os.PathLike[str]) -> int:
        """Make a (DeerFlow) memory.json the memory, unchanged; returns its fact count."""
        data = self.read_import(path)
        self._replace(data, "import", str(path))
        return len(data.get("facts", []))

    def reset(self) -> None:
        """Empty memory (recorded as a version, so it can be rolled back)."""
        self._replace(empty_memory(), "reset", "manual")

    # -- status and plumbing ------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Queue rows, the last fold (``{at, source, outcome, added, reinforced, removed,
        evicted, sections, left_out: [{item, reason, value}], held, pending_id, version,
        error}``), ``consecutive_failures`` of the memory model, the last error, paths."""
        rows = queue.status_rows(self.journal)
        try:
            fact_count: int | None = len(self.store.read_shared()[1].get("facts", []))
            memory_error = None
        except MemoryFileError as exc:
            fact_count, memory_error = None, str(exc)
        recent = fold_log.recent(self.journal.db, 1)
        last_fold: dict[str, Any] | None = recent[0] if recent else None
        if last_fold is None:  # folds journaled before memory_folds existed
            at = self.journal.db.execute(  # a fold that changed nothing counts too
                "SELECT MAX(t) FROM (SELECT MAX(folded_at) AS t FROM memory_threads UNION ALL "
                "SELECT MAX(created_at) FROM memory_versions WHERE reason IN ('fold', 'approve'))"
            ).fetchone()[0]
            last_fold = {"at": at} if at else None
        errors = [r["last_error"] for r in rows if r.get("last_error")]
        return {
            "enabled": self.settings.memory.enabled,
            "review": self.review,
            "memory_path": str(self.path),
            "journal_path": str(self.journal.path),
            "fact_count": fact_count,
            "memory_error": memory_error,
            "pending": rows,
            "pending_changes": self.journal.db["pending_changes"].count_where("status = 'pending'"),
            "last_fold": last_fold,
            "consecutive_failures": fold_log.consecutive_failures(self.journal.db),
            "last_error": errors[-1] if errors else self._last_error,
        }

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
        """Stop this home's worker if this is its last user; pending rows stay durable."""
        if self._worker is not None:
            queue.release_worker(self.settings.home, self)
            self._worker = None
        self.journal.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _find(data: dict[str, Any], fact_id: str) -> dict[str, Any] | None:
        return next((f for f in data.get("facts", []) if f.get("id") == fact_id), None)


def _takes_argument(callback: Callable[..., Any]) -> bool:
    with contextlib.suppress(TypeError, ValueError):
        params = inspect.signature(callback).parameters.values()
        return any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
            and p.default is p.empty
            for p in params
        )
    return False
