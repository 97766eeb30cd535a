"""Shared fixtures: every test points all state at a temporary home with one variable."""

from __future__ import annotations

from pathlib import Path

import pytest

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
