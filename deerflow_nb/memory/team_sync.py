"""Syncing shared projects in the background, as a kernel does (issue 39).

One daemon thread per ``Memory`` that shares a project: it syncs at once (what a killed
kernel left in the outbox is published), then again within about a second of a change
here (``on_change``) or of the team's NOTIFY on the server, and every ``interval``
seconds anyway (the polling fallback when no NOTIFY arrives). A server that cannot be
reached is tried again after ``interval``; the last report is kept for ``%memory sync``
to show. ``Memory.sync`` stays the explicit way, and the only one outside a kernel.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)
SLICE = 1.0  # seconds between looks at a local change or a stop while listening


class Syncs(Protocol):
    """What the thread needs of ``sharing.Sharing``."""

    def sync(self, timeout: float | None = None) -> Any: ...

    def projects(self) -> dict[str, dict[str, Any]]: ...

    def url_for(self, stored: str) -> str: ...


class TeamSync:
    """The background sync of one ``Sharing`` (``start`` once, ``stop`` before closing)."""

    def __init__(self, sharing: Syncs, on_change: Callable[[Any], Callable[[], None]]) -> None:
        self.sharing = sharing
        self.interval = 30.0
        self.last: Any = None  # the last SyncReport
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsubscribe = on_change(lambda info: self._wake.set())

    def start(self, interval: float = 30.0) -> bool:
        """Run in the background when a project is shared; whether it runs."""
        self.interval = interval
        if self._thread is not None and self._thread.is_alive():
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
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self._unsubscribe()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            with contextlib.ExitStack() as stack:
                listener = self._listen(stack)  # before the sync: no NOTIFY falls between
                try:
                    self.last = self.sharing.sync(timeout=self.interval)
                except Exception:  # a closed or busy journal: said in the log, tried again
                    log.warning("background team sync failed", exc_info=True)
                self._wait(listener)

    def _listen(self, stack: contextlib.ExitStack) -> Any:
        """A LISTENing connection to the first shared project's server, or None (the
        server is down or nothing is shared: then the sync polls)."""
        from ..shared.connect import SharedError
        from ..shared.exchange import listen

        urls = {entry["url"] for entry in self.sharing.projects().values()}
        if not urls:
            return None
        try:
            return stack.enter_context(listen(self.sharing.url_for(min(urls))))
        except SharedError:
            return None

    def _wait(self, listener: Any) -> None:
        """Until a NOTIFY, a local change, a stop or ``interval`` seconds."""
        deadline = time.monotonic() + self.interval
        while not self._stop.is_set() and not self._wake.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if listener is None:
                self._stop.wait(min(SLICE, left))
                continue
            try:
                if listener.wait(min(SLICE, left)):
                    return
            except Exception:  # the server went away: poll until the next sync
                listener = None
