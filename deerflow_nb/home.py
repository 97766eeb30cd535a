"""The home folder: where it is, the names of its files, and the one-line errors about it
and its config.yaml (``config`` re-exports them; ``schema/settings`` uses them without
importing ``config``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

HOME_ENV = "DEERFLOW_NB_HOME"
CONFIG_FILENAME = "config.yaml"
MEMORY_FILENAME = "memory.json"
JOURNAL_FILENAME = "journal.db"


class ConfigError(ValueError):
    """A config.yaml problem, phrased as one line that names the key and the file.

    The message never shows a secret: a value that looks like an API key (``sk-…``,
    ``Bearer …``), or any value given for a ``…key`` setting, is left out."""

    def __init__(self, message: str = "", *args: Any) -> None:
        super().__init__(_without_secrets(str(message)), *args)


# A setting that holds a secret: its name ends in ``_key``, ``token`` or ``secret``
# (``model.api_key``), not ``max_input_tokens``, nor the choice 'tokens' a message lists.
_KEY_SETTING = re.compile(r"'(?:[\w\[\]]+\.)*\w*(?:_key|token|secret)(?:\[\d+\])*'", re.IGNORECASE)
_SHOWN_VALUE = re.compile(r"(, got ).*$", re.DOTALL)
MAX_SHOWN = 60  # characters of a bad value an error quotes


def short_repr(value: object) -> str:
    """``value`` as an error quotes it: its repr (newlines and controls escaped), cut to
    ``MAX_SHOWN`` characters so a pasted blob cannot swamp the one line."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _without_secrets(message: str) -> str:
    from .scrub import redact

    setting = message.partition(", got ")[0]  # the key the message is about, not its value
    if _KEY_SETTING.search(setting):  # whatever value a key setting got stays unshown
        message = _SHOWN_VALUE.sub(r"\1a value not shown (it may be a key)", message)
    return redact(message)


class HomeError(ConfigError):
    """The home folder, or its journal, cannot be used as it is; one line naming the fix."""


def default_home() -> Path:
    """``$DEERFLOW_NB_HOME`` or ``~/.deerflow_nb``."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".deerflow_nb"


def resolve_home(home: str | os.PathLike[str] | None) -> Path:
    return Path(home).expanduser() if home is not None else default_home()
