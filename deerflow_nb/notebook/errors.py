"""The one path from an error the user can fix to IPython's one-line ``UsageError``.

Both magics raise through here: a bad argument (``grammar.Parser``), a config.yaml or home
problem (``ConfigError``, ``HomeError``), a model that cannot be reached or refuses
(``ModelError``), a damaged memory.json (``MemoryFileError``), a model reply that is no
diff or merge list (``ExtractionError``), a thread that cannot be continued
(``ThreadError``). IPython shows a ``UsageError`` as one line without a
traceback, so the message is put on one line, and anything that looks like a key is
redacted (the errors redact at their source too; a line typed by the user may hold one).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from IPython.core.error import UsageError

from ..config import ConfigError
from ..llm.base import ModelError
from ..scrub import redact

# Fixable errors of modules that %load_ext must not import: (module, class). An instance
# exists only once its module is loaded, so these are looked up, never imported.
_LOADED_LATER = (
    ("deerflow_nb.memory.store", "MemoryFileError"),
    ("deerflow_nb.memory.model_reply", "ExtractionError"),
    ("deerflow_nb.agent.core", "ThreadError"),
)


def usage_error(problem: str | BaseException) -> UsageError:
    """The one-line, redacted ``UsageError`` that says ``problem`` (a message or an error)."""
    return UsageError(re.sub(r"\s*\n\s*", " ", redact(str(problem))).strip())


def fixable(exc: BaseException) -> bool:
    """Whether ``exc`` is one of the errors whose message names the user's fix."""
    kinds: list[type[BaseException]] = [ConfigError, ModelError]  # HomeError is a ConfigError
    for module, name in _LOADED_LATER:
        # a module another thread is still importing (the warm-up) may not define it yet:
        # then no instance of it exists either
        kind = getattr(sys.modules.get(module), name, None)
        if kind is not None:
            kinds.append(kind)
    return isinstance(exc, tuple(kinds))


@contextmanager
def fixable_errors() -> Iterator[None]:
    """Turn a fixable error raised inside into its one-line ``UsageError``; others pass."""
    try:
        yield
    except Exception as exc:
        if fixable(exc):
            raise usage_error(exc) from None
        raise
