"""Syncing shared projects in the background, as a kernel does (issue 39).

One daemon thread per ``Memory`` that shares a project: it syncs at once (what a killed
kernel left in the outbox is published), then again as soon as a change here is
committed (``on_change`` nudges it: published without waiting for a poll) or a NOTIFY
arrives from ANY shared project's server (it LISTENs on each), and every ``interval``
seconds anyway (the polling fallback when no NOTIFY arrives). It waits on all of them at
once (``select`` on the listeners' sockets and a wake-up pipe), so a wake costs no slice
of polling. Its connections stay open across syncs; a lost one is made again on the next
sync (a server that cannot be reached is tried after ``interval``). A NOTIFY waits
``GATHER`` seconds for its fellows (a team's changes come in bursts) and notices that
arrive during a sync are read before the next one, which pulls them all as one batch,
one gate commit: a sync costs a memory.json write whatever it applies. The last
report is kept for ``%memory sync`` to show, and the totals since ``start``.
``Memory.sync`` stays the explicit way, and the only one outside a kernel.

A turn in a shared project first ``catch_up``s: when a teammate's notice has come (or
waits on a listener's socket) that no finished sync has taken in, it asks for the sync
now and waits for it, ``CATCH_UP`` seconds at most, so the turn injects what its kernel
was told of. With no notice it waits for nothing; with the server down there is none (the
listener is gone), so a turn never waits on the network it cannot reach.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)
GATHER = 0.5  # seconds a teammate's NOTIFY waits for more before the pull
CATCH_UP = 1.5  # seconds a turn waits at most for the sync of a noticed change


class Syncs(Protocol):
    """What the thread needs of ``sharing.Sharing``."""

    def sync(
        self, timeout: float | None = None, only: list[str] | None = None, pool: Any = None
    ) -> Any: ...

    def projects(self) -> dict[str, dict[str, Any]]: ...

    def url_for(self, stored: str) -> str: ...


class TeamSync:
    """The background sync of one ``Sharing`` (``start`` once, ``stop`` before closing)."""

    def __init__(self, sharing: Syncs, on_change: Callable[[Any], Callable[[], None]]) -> None:
        self.sharing = sharing
        self.interval = 30.0
        self.gather = GATHER
        self.last: Any = None  # the last SyncReport
        self.syncs = 0  # syncs made since start
        self.applied = 0  # teammates' change sets applied since start
        self._stop = threading.Event()
        self._progress = threading.Condition()  # a sync begun or finished
        self._begun = 0  # syncs begun since start
        self._done = 0  # syncs finished since start
        self._noticed = False  # a teammate's notice that no begun sync covers
        self._covering = False  # the sync under way began after a teammate's notice
        self._thread: threading.Thread | None = None
        self._pool: dict[str, Any] = {}  # stored URL -> an open connection
        self._listeners: dict[str, Any] = {}  # stored URL -> exchange.Listener
        self._pipe = threading.Lock()  # no write to a closed (maybe reused) descriptor
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._unsubscribe = on_change(self._changed)

    def _changed(self, info: Any) -> None:
        """After a commit here: sync now (a teammate's change, applied, is not sent back,
        so it wakes no sync). ``info`` has no default: ``Listeners`` passes it only to a
        callback that requires it."""
        if not (isinstance(info, dict) and info.get("reason") == "team"):
            self.nudge()

    def nudge(self) -> None:
        """Wake the thread for a sync now (from any thread)."""
        with self._pipe, contextlib.suppress(BlockingIOError, OSError):
            if self._write >= 0:
                os.write(self._write, b"!")

    @property
    def running(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, interval: float = 30.0) -> bool:
        """Run in the background when a project is shared; whether it runs."""
        self.interval = interval
        if self.running:
            return True
        if not self.sharing.projects():
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="deerflow-team-sync", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop the thread (a sync under way finishes first) and stop listening."""
        self._stop.set()
        self.nudge()
        self._unsubscribe()
        if self._thread is not None:
            self._thread.join(timeout=30)
            if self._thread.is_alive():  # still in a sync: it reads the pipe yet; leave it
                return
            self._thread = None
        with self._pipe:
            for fd in (self._read, self._write):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._read = self._write = -1

    def _run(self) -> None:
        from ..shared.connect import close_all

        try:
            while not self._stop.is_set():
                self._drain()  # the coming sync covers what came (a lost listener dropped)
                self._listen()  # before the sync: no NOTIFY falls between
                with self._progress:
                    self._begun += 1
                    self._covering, self._noticed = self._noticed, False
                try:
                    report = self.sharing.sync(timeout=self.interval, pool=self._pool)
                    self.last, self.syncs = report, self.syncs + 1
                    self.applied += report.applied
                except Exception:  # a closed or busy journal: said in the log, tried again
                    log.warning("background team sync failed", exc_info=True)
                finally:
                    with self._progress:
                        self._done, self._covering = self._begun, False
                        self._progress.notify_all()
                self._wait()
        finally:
            close_all(self._pool)
            for listener in self._listeners.values():
                listener.close()
            self._listeners.clear()

    def _listen(self) -> None:
        """A LISTENing connection to every shared project's server that has none (one
        that is down is tried again on the next sync; meanwhile the sync polls it)."""
        from ..shared.connect import SharedError
        from ..shared.exchange import Listener

        urls = {entry["url"] for entry in self.sharing.projects().values()}
        for stored in set(self._listeners) - urls:
            self._listeners.pop(stored).close()
        for stored in urls - set(self._listeners):
            with contextlib.suppress(SharedError):
                self._listeners[stored] = Listener.open(self.sharing.url_for(stored))

    def _drain(self) -> tuple[bool, bool]:
        """Read the nudges and notices that came (the coming sync covers them): whether
        this home was nudged, and whether a server noticed a change set."""
        nudged = noticed = False
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._read, 4096):
                nudged = True
        for stored, listener in list(self._listeners.items()):
            try:
                noticed = listener.drain() or noticed
            except Exception:  # the server went away: listen again before the next sync
                self._listeners.pop(stored).close()
                noticed = True
        if noticed:
            with self._progress:
                self._noticed = True
        return nudged, noticed

    def catch_up(self, timeout: float = CATCH_UP) -> bool:
        """Before a turn: when a teammate's notice came that no finished sync has taken in
        (read, or still on a listener's socket), sync now and wait for it, ``timeout``
        seconds at most; whether memory holds all that was noticed."""
        if not self.running:
            return True
        with self._progress:
            ask = self._noticed or self._waiting_notice()
            if not (ask or self._covering):
                return True
            # the next sync, which the nudge begins; else the one under way takes it in
            target = self._begun + 1 if ask else self._begun
        if ask:
            self.nudge()  # no gather: the turn waits
        with self._progress:
            return self._progress.wait_for(lambda: self._done >= target, timeout)

    def _waiting_notice(self) -> bool:
        """Whether a listener's socket holds a notice the thread has not read yet (maybe
        of this home's own publish: the sync it asks for then applies nothing)."""
        sockets = list(self._listeners.values())
        try:
            return bool(sockets and select.select(sockets, [], [], 0)[0])
        except Exception:  # closed under us (the driver's own error too): listened again
            return False

    def _wait(self) -> None:
        """Until a nudge, a NOTIFY from any server of another role's change set (then
        ``gather`` seconds more, cut short by a nudge, so the teammates' change sets of that
        moment come as one commit), a stop or ``interval`` seconds. A notice of this home's
        own publish wakes no pull: its change sets come back, recorded only, with the next."""
        deadline = time.monotonic() + self.interval
        while not self._stop.is_set():
            nudged, noticed = self._drain()  # a notice may wait in a connection's buffer
            if nudged:
                return
            if noticed:
                with contextlib.suppress(OSError, ValueError):
                    select.select([self._read], [], [], self.gather)
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            waiting = [self._read, *self._listeners.values()]
            try:
                ready, _, _ = select.select(waiting, [], [], left)
            except (OSError, ValueError):  # a listener closed under us: sync and listen again
                return
            if not ready or self._read in ready:
                return
            # a server's notice: the loop's drain reads it (this home's own publish: wait on)
