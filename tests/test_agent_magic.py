"""``%%agent`` in a real InteractiveShell, loaded with ``%load_ext`` as a user would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import new_shell
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import CapturedIO, capture_output
from loopback import start_server

from deerflow_nb.notebook.agent_magic import AgentArgs, interpolate, parse_agent_line
from deerflow_nb.notebook.session import close_session, get_session


def agent_cell(shell: InteractiveShell, line: str, body: str) -> tuple[Any, CapturedIO]:
    with capture_output() as cap:
        result = shell.run_cell(f"%%agent {line}\n{body}")
    return result, cap


def markdown_updates(cap: CapturedIO) -> list[str]:
    """The ``text/plain`` of every display of the turn (each also carries sanitized
    ``text/html``, and none carries ``text/markdown``, which frontends trust)."""
    assert not any("text/markdown" in o.data for o in cap.outputs)
    return [o.data["text/plain"] for o in cap.outputs if "text/html" in o.data]


def html_updates(cap: CapturedIO) -> list[str]:
    return [o.data["text/html"] for o in cap.outputs if "text/html" in o.data]


def usage_line(shell: InteractiveShell, line: str, body: str = "hello") -> str:
    result, cap = agent_cell(shell, line, body)
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    lines = [ln for ln in cap.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, cap.stderr
    return lines[0]


# -- parsing -------------------------------------------------------------------------
def test_parse_flags_into_typed_args() -> None:
    assert parse_agent_line("") == AgentArgs()
    args = parse_agent_line("-t eda --new -m offline --no-memory --no-subagents -o ans -i")
    assert args == AgentArgs(
        thread="eda",
        new=True,
        model="offline",
        no_memory=True,
        no_subagents=True,
        output="ans",
        interpolate=True,
    )
    assert parse_agent_line("--thread x --output y --allow-code").allow_code
    for bad in ("--bogus", "-t", "-o 1x", "-o for", "-t 'a b'", '-t "x'):
        with pytest.raises(UsageError):
            parse_agent_line(bad)
    # a reply stored over the kernel's own names broke every later cell (found by a review)
    for own in ("get_ipython", "__builtins__", "print", "Out"):
        with pytest.raises(UsageError, match=f"would replace Python's or IPython's own {own}"):
            parse_agent_line(f"-o {own}")


def test_interpolation_happens_once_and_braces_escape() -> None:
    ns = {"n": 3, "name": "{n}"}
    assert interpolate("rows: {n}, name: {name}", ns) == "rows: 3, name: {n}"
    assert interpolate("{{n}} and d = {'a': 1}", ns) == "{n} and d = {'a': 1}"
    with pytest.raises(UsageError, match="no variable named 'missing'"):
        interpolate("{missing}", ns)


def test_help_prints_the_flags_and_runs_nothing(shell: InteractiveShell) -> None:
    for flag in ("-h", "--help", "-t eda --help"):
        result, cap = agent_cell(shell, flag, "This message must not be sent")
        assert result.success and result.result is None
        assert "usage: %%agent" in cap.stdout and "--no-memory" in cap.stdout
        # It says what docs/security.md says: journaled, never folded.
        words = " ".join(cap.stdout.split())
        assert "never fold this turn into memory (the journal keeps it)" in words
        assert markdown_updates(cap) == []  # no turn ran
    assert "_agent" not in shell.user_ns
    with capture_output() as cap:  # the line form, since IPython refuses an empty cell
        assert shell.run_cell("%agent -h").success
    assert "usage: %%agent" in cap.stdout
    with capture_output() as cap:
        result = shell.run_cell("%agent hello")
    assert isinstance(result.error_in_exec, UsageError)
    assert "is a cell magic" in str(result.error_in_exec)


# -- cells ---------------------------------------------------------------------------
def test_a_streamed_reply_lands_in_the_cell_with_a_footer(shell: InteractiveShell) -> None:
    result, cap = agent_cell(shell, "-o answer", "Tell me about rivers, lakes and oceans")
    assert result.success, result.error_in_exec
    updates = markdown_updates(cap)
    assert len(updates) >= 3 and all(o.update for o in cap.outputs[1:])
    reply = shell.user_ns["_agent"]
    assert shell.user_ns["answer"] == reply and reply.startswith("(offline model)")
    final = updates[-1]
    assert final.startswith(reply)
    assert final.endswith("offline · thread default · ") is False
    assert final.splitlines()[-2] == "---"
    footer = final.splitlines()[-1]
    assert footer.startswith("offline · thread default · ") and " facts injected · " in footer
    project = get_session(shell).project.name  # issue 28: the notebook's project, last
    assert footer.endswith(f"· project {project}")
    assert " in / " in footer and " out tokens" in footer
    html = html_updates(cap)[-1]
    assert "<hr>" in html and "<em>offline · thread default · " in html
    partial = [u for u in updates[1:-1] if u not in ("…",)]
    assert any(reply.startswith(p) and p != reply for p in partial)  # grew token by token


def test_a_tool_round_trip_describes_a_dataframe(shell: InteractiveShell) -> None:
    shell.user_ns["orders"] = pd.DataFrame({"qty": [1, 2, None], "sku": ["a", "b", "c"]})
    result, cap = agent_cell(shell, "--no-memory", "Please describe orders")
    assert result.success
    final = markdown_updates(cap)[-1]
    assert '→ describe_variable(name="orders")' in final
    html = html_updates(cap)[-1]
    assert '<li>→ <code>describe_variable(name="orders")</code></li>' in html
    # the result's lines keep their layout: a code block, not a run-on paragraph
    assert "<li>describe_variable:<pre><code" in html
    assert ">orders: pandas DataFrame" in html
    assert "head:\n   qty sku\n0  1.0   a\n" in html
    assert "orders: pandas DataFrame, 3 rows x 2 columns" in final
    assert "missing values: qty: 1" in shell.user_ns["_agent"]


def test_subagent_progress_is_shown_live(shell: InteractiveShell) -> None:
    shell.user_ns["xs"] = [1, 2, 3]
    result, cap = agent_cell(
        shell, "", "Use sub-agents in parallel:\n- describe xs\n- list variables"
    )
    assert result.success
    updates = markdown_updates(cap)
    assert any("◦ sub-agent describe xs — started" in u for u in updates)
    assert any("sub-agent describe xs — turn 1/8" in u for u in updates)
    final = updates[-1]
    assert "✓ sub-agent describe xs — done" in final
    assert "✓ sub-agent list variables — done" in final
    assert "✓ sub-agent <strong>describe xs</strong> — done" in html_updates(cap)[-1]


def test_a_thread_resumes_after_the_shell_is_recreated(
    shell: InteractiveShell, tmp_path_factory: pytest.TempPathFactory
) -> None:
    agent_cell(shell, "-t heron --no-memory", "Our dataset is the Heron survey.")
    shell.run_line_magic("unload_ext", "deerflow_nb")
    close_session(shell)
    InteractiveShell.clear_instance()
    fresh = new_shell(tmp_path_factory.mktemp("ipython2"))
    fresh.run_line_magic("load_ext", "deerflow_nb")
    try:
        result, _ = agent_cell(fresh, "-t heron --no-memory", "What dataset did I mention?")
        assert result.success
        agent = get_session(fresh).agent()
        view = agent.last_turn.model_view
        assert view[1] == {"role": "user", "content": "Our dataset is the Heron survey."}
        assert agent.last_turn.thread == "heron"
        # a cell without -t continues the thread the last cell used; --new starts a fresh one
        agent_cell(fresh, "--no-memory", "still there?")
        assert agent.last_turn.thread == "heron"
        agent_cell(fresh, "--new --no-memory", "start over")
        assert agent.last_turn.thread == "heron-2" and len(agent.last_turn.model_view) == 2
        agent_cell(fresh, "--no-memory", "and continue")
        assert agent.last_turn.thread == "heron-2"
    finally:
        fresh.run_line_magic("unload_ext", "deerflow_nb")
        close_session(fresh)


def test_a_bad_flag_and_a_missing_key_each_give_one_line(shell: InteractiveShell) -> None:
    line = usage_line(shell, "--bogus")
    assert "unrecognized arguments: --bogus" in line and "usage: %%agent" in line
    line = usage_line(shell, "-m gpt-4o")
    assert "needs an API key" in line and "OPENAI_API_KEY" in line
    assert "empty" in usage_line(shell, "", body="   ")
    assert "no variable named 'nope'" in usage_line(shell, "-i", body="about {nope}")


def test_the_line_keeps_backslashes_as_written(shell: InteractiveShell) -> None:
    """Found by a review: ``%%agent``'s line was split with ``shlex.split``, which drops
    backslashes (a Windows path as a thread name lost them); it is split as ``%memory``'s."""
    assert parse_agent_line(r"-t C:\work\t1").thread == r"C:\work\t1"
    assert parse_agent_line(r'-t "C:\work\t1" -o ans').thread == r"C:\work\t1"
    assert parse_agent_line(r"-t 'a\b'").thread == r"a\b"
    result, _ = agent_cell(shell, r"-t C:\work\t1 --no-memory", "Hello there.")
    assert result.success, result.error_in_exec
    # the thread rule turns a separator into '-' (projects.thread_name); the words remain
    assert get_session(shell).agent().last_turn.thread == "C:-work-t1"
    assert 'unbalanced quote; close the "' in usage_line(shell, '-t "never closed')


def test_interpolation_is_opt_in(shell: InteractiveShell) -> None:
    shell.user_ns["target"] = "revenue"
    agent_cell(shell, "--no-memory", "code: {target} {{x}}")
    agent = get_session(shell).agent()
    assert agent.last_turn.messages[0]["content"] == "code: {target} {{x}}"
    agent_cell(shell, "--no-memory -i", "predict {target} {{x}}")
    assert agent.last_turn.messages[0]["content"] == "predict revenue {x}"


def test_run_code_needs_allow_code_and_shows_the_code(shell: InteractiveShell) -> None:
    body = "Run this:\n```python\nanswer_value = 6 * 7\nprint(answer_value)\n```"
    agent_cell(shell, "--no-memory", body)
    assert "answer_value" not in shell.user_ns
    result, cap = agent_cell(shell, "--no-memory --allow-code", body)
    assert result.success and shell.user_ns["answer_value"] == 42
    shown = markdown_updates(cap)
    assert any(
        u.startswith("**Running in your kernel:**\n\n```python\nanswer_value") for u in shown
    )
    assert any(">answer_value = 6 * 7\nprint(answer_value)\n</code></pre>" in h
               for h in html_updates(cap))  # fmt: skip
    assert "42" in cap.stdout


def test_run_code_shows_tag_characters_and_off_screen_code_before_it_runs(
    shell: InteractiveShell,
) -> None:
    """Unicode tag characters (hidden ASCII) and a statement pushed off-screen by a run of
    spaces are written out in the code shown, and the code still runs exactly as given."""
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "rm -rf")
    code = f'_ = "{hidden}"' + " " * 300 + "; pushed_off = True\nif _:\n" + " " * 60 + "shown = 1"
    body = f"Run this:\n```python\n{code}\n```"
    result, cap = agent_cell(shell, "--no-memory --allow-code", body)
    assert result.success and shell.user_ns["pushed_off"] is True
    (shown,) = [u for u in markdown_updates(cap) if u.startswith("**Running in your kernel")]
    assert '_ = "<U+E0072><U+E006D><U+E0020>' in shown
    assert "<300 blanks>; pushed_off = True" in shown and "<60 blanks>shown = 1" in shown
    assert not any(chr(0xE0000 + ord(c)) in shown for c in "rm -f")
    page = next(h for h in html_updates(cap) if "Running in your kernel" in h)
    assert "&lt;300 blanks&gt;; pushed_off" in page and " " * 30 not in page


@pytest.mark.usefixtures("ctrl_c_lands")
def test_ctrl_c_stops_the_turn_cleanly(shell: InteractiveShell) -> None:
    class Trap:
        def __repr__(self) -> str:
            signal.raise_signal(signal.SIGINT)
            return "never"

    shell.user_ns["trap"] = Trap()
    result, cap = agent_cell(shell, "-t trapped --no-memory", "Please describe trap")
    assert result.success  # handled: no traceback
    assert cap.stdout.strip().splitlines()[-1].startswith("%%agent: interrupted")
    journal = get_session(shell).memory.journal
    assert [t["status"] for t in journal.turns("trapped")] == ["interrupted"]
    assert "interrupted" in markdown_updates(cap)[-1].splitlines()[-1]


@pytest.mark.usefixtures("ctrl_c_lands")
def test_ctrl_c_in_code_the_agent_runs_stops_the_turn(shell: InteractiveShell) -> None:
    body = "Run this:\n```python\nimport signal\nsignal.raise_signal(signal.SIGINT)\n```"
    result, cap = agent_cell(shell, "-t stopped --no-memory --allow-code", body)
    assert result.success
    assert cap.stdout.strip().splitlines()[-1].startswith("%%agent: interrupted")
    journal = get_session(shell).memory.journal
    assert [t["status"] for t in journal.turns("stopped")] == ["interrupted"]


def test_cells_through_the_loopback_server(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    with start_server(models=("loopback-model",)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("DEERFLOW_NB_MODEL", "loopback-model")
        close_session(shell)  # the next cell reads the new configuration
        shell.user_ns["sales"] = pd.DataFrame({"revenue": [1.0, 2.5]})
        result, cap = agent_cell(shell, "--no-memory", "Please describe sales")
        assert result.success, result.error_in_exec
        assert server.request_count >= 2
    final = markdown_updates(cap)[-1]
    assert "sales: pandas DataFrame, 2 rows x 1 columns" in final
    assert final.splitlines()[-1].startswith("loopback-model · thread default")


def test_terminal_ipython_prints_the_turn_once_as_a_stream(home: Path, tmp_path: Path) -> None:
    """A terminal cannot redraw: the reply, each sub-agent status and the footer appear
    once, with no placeholder and no repeated drafts of the reply."""
    script = tmp_path / "cells.py"
    script.write_text(
        textwrap.dedent(
            """
            ip = get_ipython()
            ip.run_line_magic("load_ext", "deerflow_nb")
            ip.user_ns["xs"] = [1, 2, 3]
            ip.run_cell("%%agent --no-memory\\nPlease explain what a dataframe is.")
            ip.run_cell(
                "%%agent --no-memory\\nUse sub-agents in parallel:\\n"
                "- describe xs\\n- list variables"
            )
            """
        )
    )
    ipython = Path(sys.executable).with_name("ipython")
    done = subprocess.run(
        [str(ipython), "--no-banner", "--colors=NoColor", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DEERFLOW_NB_HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "…" not in lines
    replies = [ln for ln in lines if ln.startswith("(offline model) I read your message")]
    assert len(replies) == 1 and "explain, dataframe" in replies[0]
    assert sum(ln.startswith("offline · thread default · ") for ln in lines) == 2
    assert lines.count("✓ sub-agent describe xs — done") == 1
    assert lines.count("◦ sub-agent describe xs — started") == 1
    assert sum(ln.startswith("◦ sub-agent describe xs — turn") for ln in lines) == 1


def test_a_sub_agents_thread_cannot_be_continued(shell: InteractiveShell) -> None:
    shell.user_ns["xs"] = [1, 2, 3]
    agent_cell(shell, "-t lead --no-memory", "Use sub-agents in parallel:\n- describe xs")
    journal = get_session(shell).memory.journal
    (sub,) = [t["id"] for t in journal.threads() if t.get("kind") == "subagent"]
    line = usage_line(shell, f"-t {sub}", "I prefer rust over go.")
    assert f"thread '{sub}' is a sub-agent's; continue its lead thread 'lead'" in line
    assert [m["role"] for m in journal.messages(sub)].count("user") == 1  # nothing added
