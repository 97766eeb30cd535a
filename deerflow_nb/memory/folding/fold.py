"""Folding: a thread's new turns, through the memory model, into one journaled change.

``enqueue`` snapshots what a thread has not folded yet into ``memory_queue``; a fold (the
background worker's, ``worker.py``, or ``flush``'s, synchronously) claims the row
(``schedule.py``), asks the memory model for a diff and applies it exactly as ``apply``
does: through the gate (``updates/gate.py``: review mode, the wipe guard), which the ledger
commits, recorded in ``memory_folds`` (``fold_log.py``) in the same transaction.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from typing import Any

from ...config import Settings
from ...llm.base import SAID_IN_ONE_LINE, output_cap
from ...llm.server_sharing import GiveWay
from ...projects import DEFAULT_PROJECT
from ...schema.changes import ChangeSet
from ...schema.diff import ExtractionDiff, diff_json_schema
from ...scrub import redact
from ...storage import queue as queue_rows
from ...storage.contract import LeaseLost
from ...storage.journal import Journal, row_to_message
from ..model_reply import check_holdable
from ..readside.fold_records import FAILED
from ..reports import ApplyReport, FlushReport
from ..scopes import Scope, view
from ..store import MemoryFileError, MemoryLocked
from ..updates.gate import Gate, Passed
from ..updates.write_protocol import Ledger
from . import fold_log, schedule
from .extraction import ExtractionError, build_messages, paired_removals, parse
from .message_filter import filter_messages, is_foldable

log = logging.getLogger(__name__)
# A fold that gave way to the user's turn looks again this much later (it gives way again
# without a request while the turn runs, so this only bounds how soon it follows the turn).
GIVE_WAY_SECONDS = 2.0
# How often a flush looks again at a thread another kernel on the home is folding.
ELSEWHERE_POLL_SECONDS = 0.1


class Folding:
    """The fold queue of one ``Memory``: what it queues, and how a queued row folds."""

    def __init__(
        self,
        settings: Settings,
        journal: Journal,
        ledger: Ledger,
        gate: Gate,
    ) -> None:
        self.settings = settings
        self.journal = journal  # the worker reads the queue through its first member's
        self.ledger = ledger
        self.gate = gate
        self.lock = schedule.fold_lock(settings.home)  # one fold at a time: worker or flush
        self.last_error: str | None = None
        self.waiting_for_user = False  # the last fold gave way to a user's turn
        self._orphans_checked = False
        self._orphans_lock = threading.Lock()

    def _seen(self, project: str) -> dict[str, Any]:
        """memory.json as a fold in ``project`` sees it (read-only)."""
        return dict(view(self.ledger.shared()[1], Scope.of(project)).data)

    # -- applying a diff -----------------------------------------------------------------
    def apply(
        self,
        diff: ExtractionDiff,
        source: str,
        row: dict[str, Any] | None = None,
        project: str | None = None,
    ) -> ApplyReport:
        """Apply a checked diff as a fold, through the gate, its record journaled in the same
        transaction, and, for a queued ``row``, the row's end. ``project`` takes the items
        labelled ``scope: project``."""
        project = project or DEFAULT_PROJECT
        left_out = [item.to_dict() for item in diff.left_out]
        clean = diff.to_dict()
        # What the project sees is read only for the one case that needs it (a removal beside
        # a malformed new fact), not on every fold.
        kept, unpaired = paired_removals(diff, self._seen(project) if diff.malformed else {})
        clean["factsToRemove"], left_out = kept, left_out + unpaired
        change = ChangeSet(origin="fold", reason="fold", source=source, diff=clean, project=project)
        with self.gate.committing(change) as committed:
            report = fold_report(committed.outcome, left_out)
            _record_fold(committed.db, source, report)
            if row is not None:
                self._finish_fold(committed.db, row)
        return report

    # -- the queue -----------------------------------------------------------------------
    def enqueue(self, thread_id: str) -> float | None:
        """Snapshot the journaled thread into ``memory_queue`` and restart the debounce;
        when the row is due (``schedule.clock``).

        None (and nothing queued) when memory is disabled, the thread is a sub-agent's, or
        it lacks a user message and an assistant reply.
        """
        thread = self.journal.thread(thread_id)
        if thread is None or thread.get("kind") == "subagent":
            return None
        if not self.settings.memory.enabled:
            self.skip(thread_id)
            return None
        return self._queue_unfolded(thread_id, self.settings.memory.debounce_seconds)

    def skip(self, thread_id: str) -> None:
        """Keep the thread's turns so far out of memory (memory disabled).

        Turns already queued stay queued; only what was journaled since is passed over.
        (A ``--no-memory`` turn is journaled as private instead, which no fold reads.)
        """
        with self.journal.transaction() as db:  # checked and marked with no enqueue between
            if not queue_rows.is_queued(db, thread_id):
                schedule.mark_folded(db, thread_id, self.journal.last_seq(thread_id))

    def _queue_unfolded(self, thread_id: str, debounce: float) -> float | None:
        """Queue what the thread has not folded yet, read and written in one transaction
        (so a fold finishing meanwhile cannot leave a stale snapshot); when the row is
        due, or None if unfoldable."""
        with self.journal.transaction() as db:
            snapshot, last_seq = unfolded(self.journal, thread_id)
            if not is_foldable(snapshot):
                return None
            return schedule.queue_snapshot(db, thread_id, snapshot, last_seq, debounce)

    def _finish_fold(self, db: Any, row: dict[str, Any]) -> None:
        """Inside the fold's transaction: mark the row folded; a snapshot queued during the
        fold is cut to the turns after it, so none is folded twice. A fold whose lease
        another kernel took over commits nothing (``LeaseLost``)."""
        schedule.check_held(db, row)
        if schedule.finish(db, row):
            snapshot, last_seq = unfolded(self.journal, row["thread_id"])
            schedule.replace_snapshot(
                db, row["thread_id"], snapshot if is_foldable(snapshot) else None, last_seq
            )

    def schedule_orphans(self) -> None:
        """Once: queue lead threads journaled past their last fold but never enqueued (a
        crash between journaling a turn and enqueuing it); they fold without waiting."""
        with self._orphans_lock:
            if self._orphans_checked:
                return
            for thread_id in queue_rows.orphan_threads(self.journal.db):
                self._queue_unfolded(thread_id, 0.0)
            self._orphans_checked = True

    # -- folding -------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> FlushReport:
        """Fold every pending thread now (failed ones too) in the calling thread, started or
        not; what happened. ``timeout`` (seconds) bounds it all: a thread cut short stays
        queued; one another kernel folds is waited for (folded here if that kernel dies). It
        uses this object's settings (its model), whoever started the worker; memory off: none."""
        if self.settings.memory.enabled:
            self.schedule_orphans()
            report = self.fold_locked(True, timeout, wait_elsewhere=True)
            if report is not None:
                return report
        return FlushReport(pending=schedule.pending_count(self.journal))

    def fold_locked(
        self, force: bool, timeout: float | None = None, *, wait_elsewhere: bool = False
    ) -> FlushReport | None:
        """Fold the due rows (every row when ``force``) under this home's fold lock; None
        when a fold already running in this process outlasts ``timeout``. ``wait_elsewhere``
        (a flush): also wait for the rows another kernel on the home is folding."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return None
        try:
            return self.fold_pending(force, deadline, wait_elsewhere)
        finally:
            self.lock.release()

    def fold_pending(
        self, force: bool, deadline: float | None, wait_elsewhere: bool = False
    ) -> FlushReport:
        """Under this process's fold lock: claim and fold the due rows."""
        self.ledger.settle()  # the fold's prompt lists the facts: never a half-applied state
        report = FlushReport()
        elsewhere = []
        for thread_id in schedule.queued_threads(self.journal):
            if deadline is not None and time.monotonic() > deadline:
                break
            claimed = schedule.claim(self.journal, thread_id, force=force)
            if claimed is not None:
                with schedule.leased(self.journal, claimed):
                    self._fold_row(claimed, report, deadline)
            elif wait_elsewhere:
                elsewhere.append(thread_id)
        for thread_id in elsewhere:
            self._await_elsewhere(thread_id, report, deadline)
        report.pending = schedule.pending_count(self.journal)
        return report

    def _await_elsewhere(self, thread_id: str, report: FlushReport, deadline: float | None) -> None:
        """A flush promises the thread folded: while another kernel on this home folds it,
        wait (until ``deadline``); if that kernel let it go (it died, or gave up), fold it."""
        while schedule.held_elsewhere(self.journal, thread_id):
            if deadline is not None and time.monotonic() > deadline:
                return
            time.sleep(ELSEWHERE_POLL_SECONDS)
        claimed = schedule.claim(self.journal, thread_id, force=True)
        if claimed is not None:
            with schedule.leased(self.journal, claimed):
                self._fold_row(claimed, report, deadline)

    def _fold_row(self, row: dict[str, Any], report: FlushReport, deadline: float | None) -> None:
        thread_id = row["thread_id"]
        try:
            conversation = json.loads(row["snapshot"])
            project = self.journal.thread_project(thread_id) or DEFAULT_PROJECT
            seen = self._seen(project)  # the user's facts and the fold's project's only
            messages, handles = build_messages(seen, conversation)
            from ...llm import get_chat_model

            model = get_chat_model(self._settings_until(deadline), self.settings.memory_model_name)
            limit = self.settings.model.max_output_tokens
            cap = output_cap(limit, model.max_input_tokens, messages)
            schema = diff_json_schema(list(handles))
            reply = model.bounded(
                messages, max_output_tokens=cap, json_mode=True, json_schema=schema
            )
            check_holdable(reply.content)
            diff = parse(reply.content, handles)
            outcome = self.apply(diff, thread_id, row, project=project)
        except GiveWay:  # the user's turn needs the server: the row waits, no attempt spent
            self.waiting_for_user = True
            schedule.defer(self.journal, row, GIVE_WAY_SECONDS)
            report.waiting.append(thread_id)
            return
        except LeaseLost as exc:  # another kernel has the row now: its fold counts, not ours
            log.warning("memory fold of %s dropped: %s", thread_id, exc)
            return
        except MemoryLocked as exc:  # a stopped kernel holds memory.json: the row waits
            log.warning("memory fold of %s waits: %s", thread_id, exc)
            error = f"{type(exc).__name__}: {exc}"
            self.last_error = report.failed[thread_id] = error
            schedule.wait_for_lock(self.journal, row, error)
            return
        except Exception as exc:  # any failure keeps the row for a bounded retry
            self.waiting_for_user = False
            if isinstance(exc, SAID_IN_ONE_LINE):
                log.warning("memory fold of %s failed: %s", thread_id, exc)
            elif not isinstance(exc, ExtractionError | MemoryFileError):  # shown by status
                log.warning("memory fold of %s failed", thread_id, exc_info=True)
            error = redact(f"{type(exc).__name__}: {exc}", self._secrets())
            self.last_error = error
            report.failed[thread_id] = error
            with self.journal.transaction() as db:  # the row's retry and the fold's record
                schedule.record_failure(db, row, error)
                with contextlib.suppress(Exception):
                    fold_log.record(db, source=thread_id, outcome=FAILED, error=error)
            return
        except BaseException:  # Ctrl-C mid-fold: hand the row back now, not when the lease ends
            schedule.release(self.journal, row)
            raise
        self.waiting_for_user = False
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
        bounded = model.model_copy(
            update={"timeout_seconds": min(model.timeout_seconds, left), "max_retries": 0}
        )
        return self.settings.model_copy(update={"model": bounded})


def unfolded(journal: Journal, thread_id: str) -> tuple[list[dict[str, Any]], int]:
    """The filtered messages journaled after the thread's last fold, private turns left
    out, and the last seq (private turns included, so a fold passes them): what a queued
    row holds (``Folding.enqueue``, ``SQLiteHome.enqueue``).

    A fold reads only what it has not folded before, so a fact the user forgot with
    ``%memory forget`` is not learned again from the turn that first stated it.
    """
    after = queue_rows.folded_seq(journal.db, thread_id)
    rows = journal.message_rows(thread_id, after_seq=after)
    last_seq = max((r["seq"] for r in rows), default=0)
    private = journal.private_turn_ids(thread_id)
    kept = [row_to_message(r) for r in rows if r["turn_id"] not in private]
    return filter_messages(kept), last_seq


def fold_report(outcome: Passed, left_out: list[dict[str, Any]]) -> ApplyReport:
    """What a fold did, from the gate's outcome and the items the diff's check left out."""
    result = outcome.result
    report = ApplyReport.from_result(result, outcome.version)
    report.left_out = left_out + report.left_out
    report.left_out += [
        {"item": "factsToRemove", "reason": "names no stored fact", "value": i}
        for i in result.ignored_removals
    ]
    report.pending_id, report.held = outcome.pending_id, outcome.held
    report.left_out = fold_log.bounded(report.left_out)
    report.outcome = fold_log.outcome_of(
        report.to_dict(), version=outcome.version, held_all=outcome.held_all
    )
    return report


def _record_fold(db: Any, source: str, report: ApplyReport) -> None:
    fold_log.record(
        db,
        source=source,
        outcome=report.outcome,
        report=report.to_dict(),
        version=report.version,
        pending_id=report.pending_id,
    )
