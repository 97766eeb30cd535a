"""Waiting on events, not on the clock: ``wait_until`` and a clock tests move by hand."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, what: str = "") -> T:
    """Poll ``predicate`` until it returns something true, and return that; fail the test
    when ``timeout`` (a bound for a broken build, never a duration the test relies on)
    passes first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout} s waiting for {what or predicate}")
        time.sleep(0.02)


class ManualClock:
    """A wall clock that moves only when told (``advance``): ``clock()`` is its time."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
