"""Model servers as shared resources: what each accepts, and the user's turn first.

A local server (llama.cpp's, Ollama) often serves one request at a time, so a background
fold that holds it makes the user's next turn wait, or cuts its stream off. ``Server`` is
one endpoint as this process sees it:

- ``traits``: what the server has shown it accepts (which output-cap parameter, whether
  it takes a JSON schema), learned from its own 400 once and remembered in the home's
  journal (``storage/servers.py``), so every kernel sharing the home asks right first;
- ``foreground()``: held around a user's turn or model call (and the doctor's probes);
  it takes a lease (counted in this process, and a journal row other kernels see, renewed
  by a heartbeat so that it lapses within ``storage.servers.lease_seconds()`` of a holder
  that died), tells every background request running here to give way and waits
  (``CANCEL_WAIT_SECONDS`` at most) until they have;
- ``background()``: held around a fold's request; it refuses to start while any lease is
  live (``GiveWay``), and ``should_yield`` says when one started since.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..scrub import public_url
from .base import ModelError

if TYPE_CHECKING:
    from ..storage.db import Connection
    from ..storage.journal import Journal

log = logging.getLogger(__name__)

CAP_PARAM = "cap_param"  # max_tokens | max_completion_tokens
SCHEMA_OUTPUT = "json_schema"  # yes | no
CAP_PARAMS = ("max_tokens", "max_completion_tokens")
LEASE_POLL_SECONDS = 0.5  # how often a background request looks for other kernels' leases
# The longest a user's request waits for this process's background requests to stop (each
# stops at its next chunk): sent sooner, it would reach a single-slot server behind the
# fold's, or (llama-cpp-python) be cut off by it arriving late.
CANCEL_WAIT_SECONDS = 15.0


class GiveWay(ModelError):
    """A background request did not start, or stopped, because the user's turn needs the
    server; the fold is re-queued, not failed."""


class Server:
    """One endpoint (its base URL) as this process sees it; see the module docstring."""

    def __init__(self, endpoint: str, journal_path: Path | None) -> None:
        self.endpoint = endpoint
        self.journal_path = journal_path
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when a background call ends
        self._traits: dict[str, str] | None = None
        self._foreground = 0
        self._held = threading.local()
        self._generation = 0  # bumped by every foreground request that starts
        self.background_running = 0  # background requests in flight in this process
        self._polled = 0.0
        self._remote_busy = False

    # -- traits ----------------------------------------------------------------------
    def trait(self, name: str) -> str | None:
        """What the server showed for ``name``, or None when not learned yet."""
        with self._lock:
            if self._traits is None:
                self._traits = self._read_traits()
            return self._traits.get(name)

    def learn(self, name: str, value: str) -> None:
        """Remember ``name`` = ``value`` here and in the home (best effort: a home that
        cannot be written only means asking the server again next time)."""
        with self._lock:
            if self._traits is None:
                self._traits = self._read_traits()
            self._traits[name] = value
        from ..storage import servers as rows

        try:
            with self._journal() as journal:
                if journal is not None:
                    with journal.transaction() as db:
                        rows.remember(db, self.endpoint, name, value)
        except Exception as exc:
            log.warning("could not remember %s of %s: %s", name, self.endpoint, exc)

    def _read_traits(self) -> dict[str, str]:
        from ..storage import servers as rows

        try:
            with self._reading() as db:
                return {} if db is None else rows.traits(db, self.endpoint)
        except Exception:
            return {}

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection | None]:
        """A read-only connection to the home's journal (none when it does not exist yet):
        a fold polls the leases twice a second, and must not take the write lock to."""
        if self.journal_path is None:
            yield None
            return
        from ..storage.db import open_read_only

        with open_read_only(self.journal_path) as db:
            yield db

    @contextlib.contextmanager
    def _journal(self) -> Iterator[Journal | None]:
        """The home's journal for one read or write, closed after it (a ``Server`` lives
        as long as the process; its connections should not); None without a home."""
        if self.journal_path is None:
            yield None
            return
        from ..storage.journal import Journal

        try:
            journal = Journal(self.journal_path)
        except Exception as exc:
            log.warning("cannot open %s for the model server's rows: %s", self.journal_path, exc)
            yield None
            return
        try:
            yield journal
        finally:
            journal.close()

    # -- who uses the server now -------------------------------------------------------
    @contextlib.contextmanager
    def foreground(self, *, lease: bool = True) -> Iterator[None]:
        """Around a user's request: background requests give way until it ends. Nested
        holds in one thread count once. ``lease=False`` holds off this process's folds
        only (no journal row: the doctor writes nothing to the home)."""
        depth = getattr(self._held, "depth", 0)
        self._held.depth = depth + 1
        taken = None
        if depth == 0:
            with self._lock:
                self._foreground += 1
                self._generation += 1  # every running background call gives way
                self._idle.wait_for(lambda: not self.background_running, CANCEL_WAIT_SECONDS)
            taken = self._take_lease() if lease else None
        try:
            yield
        finally:
            self._held.depth = depth
            if depth == 0:
                with self._lock:
                    self._foreground -= 1
                self._drop_lease(taken)

    def busy(self) -> bool:
        """True while a foreground request runs on this endpoint, here or in another
        kernel sharing the home (its journal lease, read at most every
        ``LEASE_POLL_SECONDS``)."""
        with self._lock:
            if self._foreground:
                return True
        now = time.monotonic()
        if now - self._polled >= LEASE_POLL_SECONDS:
            self._polled = now
            self._remote_busy = self._leases() > 0
        return self._remote_busy

    @contextlib.contextmanager
    def background(self) -> Iterator[Background]:
        """Around a fold's request: ``GiveWay`` now if the server is busy with the user;
        the yielded ``Background`` tells the request when to stop."""
        self._polled = 0.0  # look at the journal now, not at a half-second-old answer
        if self.busy():
            raise GiveWay(f"{self.endpoint} is answering the user's turn; the fold waits")
        with self._lock:
            start = self._generation
            self.background_running += 1
        try:
            yield Background(self, start)
        finally:
            with self._lock:
                self.background_running -= 1
                self._idle.notify_all()

    def _take_lease(self) -> Lease | None:
        from ..storage import servers as rows
        from ..storage.db import new_id

        lease = new_id("lease-")
        try:
            with self._journal() as journal:
                if journal is None:
                    return None
                with journal.transaction() as db:
                    rows.sweep_dead(db)
                    rows.take_lease(db, lease, self.endpoint)
        except Exception as exc:  # the turn goes on; only other kernels' folds cannot see it
            log.warning("could not take a lease on %s: %s", self.endpoint, exc)
            return None
        return Lease(self, lease)

    def _renew(self, lease: str) -> None:
        """One heartbeat: the lease counts ``lease_seconds()`` more (taken again if it was
        swept after lapsing, as a long pause of this process can make it)."""
        from ..storage import servers as rows

        try:
            with self._journal() as journal:
                if journal is not None:
                    with journal.transaction() as db:
                        if not rows.renew_lease(db, lease):
                            rows.take_lease(db, lease, self.endpoint)
        except Exception as exc:  # it lapses; other kernels' folds may start meanwhile
            log.warning("could not renew the lease on %s: %s", self.endpoint, exc)

    def _drop_lease(self, held: Lease | None) -> None:
        if held is None:
            return
        held.stop()
        lease = held.id
        from ..storage import servers as rows

        try:
            with self._journal() as journal:
                if journal is not None:
                    with journal.transaction() as db:
                        rows.drop_lease(db, lease)
        except Exception as exc:  # a dead owner's lease is swept; a live one's ends with it
            log.warning("could not drop the lease on %s: %s", self.endpoint, exc)

    def _leases(self) -> int:
        from ..storage import servers as rows

        try:
            with self._reading() as db:
                return 0 if db is None else rows.live_leases(db, self.endpoint)
        except Exception:
            return 0


class Lease:
    """A journal lease and the heartbeat that renews it every third of its life, until
    ``stop``: a holder that dies stops renewing, and its lease lapses."""

    def __init__(self, server: Server, lease_id: str) -> None:
        from ..storage.servers import lease_seconds

        self.id = lease_id
        self._server = server
        self._stopped = threading.Event()
        self._interval = lease_seconds() / 3
        self._thread = threading.Thread(target=self._beat, name=f"lease {lease_id}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stopped.wait(self._interval):
            self._server._renew(self.id)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


class Background:
    """One background request's view of its server: ``should_yield`` is True once a
    foreground request started after it, here or in another kernel."""

    def __init__(self, server: Server, generation: int) -> None:
        self.server = server
        self.generation = generation

    def should_yield(self, *, now: bool = False) -> bool:
        """``now``: read other kernels' leases afresh, not the last poll's answer."""
        if now:
            self.server._polled = 0.0
        with self.server._lock:
            if self.server._generation != self.generation:
                return True
        return self.server.busy()

    def give_way(self) -> GiveWay:
        return GiveWay(
            f"the user's turn started on {self.server.endpoint}; the fold gave way and waits"
        )


_servers: dict[tuple[str, Path | None], Server] = {}
_servers_lock = threading.Lock()


def server_for(base_url: str, journal_path: Path | None) -> Server:
    """This process's ``Server`` for ``base_url`` with the home whose journal remembers it;
    its identity there is the address without user info (no password rests on disk)."""
    key = (public_url(base_url).rstrip("/"), journal_path.resolve() if journal_path else None)
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            server = _servers[key] = Server(key[0], key[1])
        return server
