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


_KEY_SETTING = re.compile(r"'[\w.\[\]]*(?:api_key|_key|token|secret)[\w\[\]]*'", re.IGNORECASE)
_SHOWN_VALUE = re.compile(r"(, got ).*$", re.DOTALL)


def _without_secrets(message: str) -> str:
    from .scrub import redact

    if _KEY_SETTING.search(message):  # whatever value a key setting got stays unshown
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
