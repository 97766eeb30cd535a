"""Shared fixtures: every test points all state at a temporary home with one variable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from deerflow_nb.llm.server import ServerHandle

MODEL_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "DEERFLOW_NB_MODEL",
    "DEERFLOW_NB_MEMORY_MODEL",
    "DEERFLOW_NB_API_KEY",
)


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``DEERFLOW_NB_HOME`` with no model keys: the offline model runs."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("DEERFLOW_NB_HOME", str(path))
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def loopback_server() -> Iterator[ServerHandle]:
    """The offline model behind a real OpenAI-compatible HTTP server on a free loopback port."""
    from deerflow_nb.llm.server import start_server

    with start_server() as handle:
        yield handle
