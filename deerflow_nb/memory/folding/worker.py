"""The fold worker: one daemon thread per home per process that folds due queue rows.

``Memory.start`` joins the home's worker with its ``Folding`` and ``Memory.close`` leaves
it; the last to leave stops it. The worker waits for the next due time (restarted by
every enqueue through ``notify``), then folds with the first joined ``Folding`` (a queued
row does not say which one queued it) under the home's fold lock, as a flush does. Calls
run one way: worker → ``Folding`` → schedule, gate and ledger below it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from pathlib import Path

from ...config import ConfigError
from ..reports import FlushReport
from . import schedule
from .fold import Folding

log = logging.getLogger(__name__)

EXIT_FLUSH_SECONDS = 30.0
THREAD_NAME = "deerflow-nb-memory-queue"


class FoldWorker:
    """The daemon thread that folds due rows for one home in this process."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.members: list[Folding] = []  # the started ``Folding`` of each open Memory
        self._wake = threading.Condition()
        self._stop = False
        # When the worker will read the queue again by itself (a due time, in schedule's
        # clock); None while it waits for a notice only. A row queued later needs no notice.
        self._looks_at: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_NAME}:{home}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        atexit.register(self._at_exit)

    def notify(self, due: float | None = None) -> None:
        """Look at the queue again now (a test moved the clock). Given ``due``, the due
        time of a row just queued, only if the worker would look later than that by
        itself: an enqueue mostly pushes due times back, and waking the thread after
        every turn cost that turn a switch to it."""
        with self._wake:
            if due is not None and self._looks_at is not None and self._looks_at <= due:
                return
            self._wake.notify_all()

    def fold(self, force: bool, timeout: float | None = None) -> FlushReport | None:
        """Fold with the first member; None when there is none, or when another fold here
        outlasts ``timeout``."""
        members = list(self.members)
        return members[0].fold_locked(force, timeout) if members else None

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        atexit.unregister(self._at_exit)

    def _next_due(self) -> float | None:
        members = list(self.members)
        return schedule.next_due(members[0].journal) if members else None

    def _run(self) -> None:
        while True:
            with self._wake:
                if self._stop:
                    return
                try:
                    due = self._next_due()
                except Exception as exc:  # a locked or vanished journal: try again shortly
                    log.warning("memory queue could not read journal.db: %s", exc)
                    due = schedule.clock() + 5
                wait = None if due is None else max(0.0, due - schedule.clock())
                if wait is None or wait > 0:
                    self._looks_at = due
                    self._wake.wait(timeout=wait)
                    continue
            try:
                self.fold(force=False)
            except ConfigError as exc:  # a locked journal, a full disk: one line
                log.warning("memory fold failed: %s", exc)
                time.sleep(1.0)
            except Exception:
                log.exception("memory fold failed")
                time.sleep(1.0)

    def _at_exit(self) -> None:
        """Fold what is pending before the interpreter exits; rows stay durable if this fails."""
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        with contextlib.suppress(Exception):
            self.fold(force=True, timeout=EXIT_FLUSH_SECONDS)


_workers: dict[Path, FoldWorker] = {}
_workers_guard = threading.Lock()


def join(folding: Folding) -> FoldWorker:
    """This process's worker for ``folding``'s home, started on first use."""
    key = folding.settings.home.resolve()
    with _workers_guard:
        worker = _workers.get(key)
        if worker is None:
            worker = _workers[key] = FoldWorker(key)
            worker.members.append(folding)
            worker.start()
        else:
            worker.members.append(folding)
    worker.notify()
    return worker


def leave(folding: Folding) -> None:
    """``folding``'s Memory is closing; the last member to leave stops the worker."""
    key = folding.settings.home.resolve()
    with _workers_guard:
        worker = _workers.get(key)
        if worker is None or folding not in worker.members:
            return
        with folding.lock:
            worker.members.remove(folding)
        if worker.members:
            return
        del _workers[key]
    worker.stop()
