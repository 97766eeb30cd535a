"""``Memory.on_change``'s listeners: called after every change, from whichever thread made it."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Listeners:
    """The callbacks of one ``Memory``; a failing one is logged, never raised into a change."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[..., Any]] = []

    def add(self, callback: Callable[..., Any]) -> Callable[[], None]:
        """``Memory.on_change``: call ``callback`` after every change, from whichever thread
        made it (with a small dict: reason, version, source, if it takes one); returns a
        function that unsubscribes it."""
        self.callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self.callbacks.remove(callback)

        return unsubscribe

    def __call__(self, info: dict[str, Any]) -> None:
        for callback in list(self.callbacks):
            try:
                if _takes_argument(callback):
                    callback(info)
                else:
                    callback()
            except Exception:
                log.warning("memory on_change callback %r failed", callback, exc_info=True)


def _takes_argument(callback: Callable[..., Any]) -> bool:
    with contextlib.suppress(TypeError, ValueError):
        params = inspect.signature(callback).parameters.values()
        return any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
            and p.default is p.empty
            for p in params
        )
    return False
