"""Shared fixtures: every test points all state at a temporary home with one variable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from deerflow_nb.session import close_session

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


@pytest.fixture
def model_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerHandle]:
    """The offline model behind the loopback server, configured as the model: every model
    call is real HTTP, and the test can hold or fail requests (``hold_next``, ``fail_next``)."""
    from deerflow_nb.llm.server import start_server

    with start_server(models=("loopback-model",)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("DEERFLOW_NB_MODEL", "loopback-model")
        yield server


def new_shell(ipython_dir: Path) -> InteractiveShell:
    """The process's InteractiveShell, with history in memory and its own IPython dir."""
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.ipython_dir = str(ipython_dir)
    return InteractiveShell.instance(config=config)


@pytest.fixture
def ipython(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InteractiveShell]:
    """A real InteractiveShell, reset before and after the test."""
    if not InteractiveShell.initialized():
        new_shell(tmp_path_factory.mktemp("ipython"))
    ip = InteractiveShell.instance()
    ip.reset()
    yield ip
    ip.reset()


@pytest.fixture
def shell(ipython: InteractiveShell) -> Iterator[InteractiveShell]:
    """The shell with ``%load_ext deerflow_nb`` run as a user would; its session is
    closed afterwards so the next test's home gets a fresh Memory."""
    ipython.run_line_magic("load_ext", "deerflow_nb")
    yield ipython
    ipython.run_line_magic("unload_ext", "deerflow_nb")
    close_session(ipython)
