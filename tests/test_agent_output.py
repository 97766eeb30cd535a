"""How a ``%%agent`` cell's output reads in a notebook (issue 30): nested fences, whole
table rows, preformatted lines that do not break inside words, short tool lines, and
``--allow-code`` output in the order things happened (in a real kernel, via nbclient)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from nbclient import NotebookClient

from deerflow_nb.notebook.agent_display import TurnView, nest_fences, summarize_arguments


def final_html(shell: InteractiveShell, line: str, body: str) -> tuple[str, str]:
    """The last display of one ``%%agent`` cell: its HTML and its plain text."""
    with capture_output() as cap:
        result = shell.run_cell(f"%%agent {line}\n{body}")
    assert result.success, result.error_in_exec
    last = [o.data for o in cap.outputs if "text/html" in o.data][-1]
    return last["text/html"], last["text/plain"]


def code_blocks(page: str) -> list[str]:
    return [html.unescape(b) for b in re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", page, re.S)]


def test_a_fence_inside_a_fenced_block_reads_as_text() -> None:
    reply = (
        "Write it like this:\n\n```markdown\n# Report\n\n```text\nR² = 0.52\n```\n\nDone.\n```\n"
        "\nThat is all."
    )
    view = TurnView()
    view.reply = reply
    page = view.output()._repr_mimebundle_()["text/html"]
    (block,) = code_blocks(page)  # one block, the inner fence inside it as text
    assert block == "# Report\n\n```text\nR² = 0.52\n```\n\nDone.\n"
    assert "<p>That is all.</p>" in page
    assert view.text().startswith(reply)  # the plain text is the reply as written


def test_fences_are_left_alone_unless_nesting_balances() -> None:
    streaming = "```markdown\n```text\nx\n```\n"  # the outer block is not closed yet
    assert nest_fences(streaming) == streaming
    literal = 'Code:\n```python\ns = """\n```text\n"""\n'  # a lone fence line inside code
    assert nest_fences(literal) == literal
    plain = "```python\nprint(1)\n```\n\n```text\nout\n```"
    assert nest_fences(plain) == plain
    nested = "````md\n```text\nx\n```\n````"  # already longer outside: nothing to do
    assert nest_fences(nested) == nested


def test_a_wide_dataframe_head_is_shown_whole_and_keeps_its_lines(
    shell: InteractiveShell,
) -> None:
    columns = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6", "target"]
    data = np.random.default_rng(0).normal(size=(442, len(columns)))
    shell.user_ns["diab"] = pd.DataFrame(data, columns=columns)
    page, _ = final_html(shell, "--no-memory", "Please describe diab")
    (block,) = code_blocks(page)
    head = shell.user_ns["diab"].head(5).to_string().splitlines()
    assert block.splitlines()[-6:] == head  # every row whole, none cut mid-row
    assert "…" not in block
    # JupyterLab's output area breaks <pre> anywhere (word-break: break-all); the code in
    # ours keeps its lines and scrolls
    style = re.search(r'<pre><code style="([^"]*)"', page).group(1)
    assert "white-space: pre" in style and "word-break: normal" in style


def test_a_tool_line_summarises_its_arguments(shell: InteractiveShell) -> None:
    page, plain = final_html(shell, "--no-memory", "Please write code to plot bmi against age")
    tool_line = next(ln for ln in plain.splitlines() if ln.startswith("- → "))
    assert re.fullmatch(r"- → propose_cell\(code: \d+ lines\)", tool_line), tool_line
    assert "\\n" not in page and "Proposed by the offline model" not in page
    proposed = shell.rl_next_input if hasattr(shell, "rl_next_input") else None
    assert proposed and proposed.startswith("# Proposed by the offline model")


def test_summarize_arguments() -> None:
    assert summarize_arguments('{"name": "orders"}') == 'name="orders"'
    assert summarize_arguments('{"number": 3, "part": "output"}') == 'number=3, part="output"'
    assert summarize_arguments('{"code": "a = 1\\nb = 2\\n"}') == "code: 2 lines"
    long = summarize_arguments('{"query": "' + "x" * 100 + '"}')
    assert long.startswith('query="xxx') and long.endswith("…") and len(long) == 6 + 60
    assert summarize_arguments('{"code": "x = 1"}') == "code: 1 line"
    assert summarize_arguments("not json at all") == "not json at all"
    assert summarize_arguments("{}") == ""


def test_allow_code_output_comes_where_it_happens(home: Path, tmp_path: Path) -> None:
    """In a real kernel: the tool line, the code, what it printed, then the answer and
    the footer, in that order (display updates applied in place, as a front end does)."""
    nb = nbformat.v4.new_notebook()
    body = "Run this:\n```python\nprint('printed by', 6 * 7)\n```"
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext deerflow_nb"),
        nbformat.v4.new_code_cell(f"%%agent --no-memory --allow-code\n{body}"),
    ]
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    shown = []
    for output in nb.cells[1].outputs:
        if output.output_type == "stream":
            shown.append(output.text)
        elif output.output_type == "display_data":
            shown.append(output.data["text/plain"])
    text = "\n".join(shown)
    order = [
        text.index("→ run_code(code: 1 line)"),
        text.index("Running in your kernel"),
        text.index("printed by 42"),
        text.index("(offline model)"),
        text.index("facts injected"),
    ]
    assert order == sorted(order), shown
    assert text.count("print('printed by', 6 * 7)") == 1  # the code shows once


def test_re_running_a_cell_that_proposed_code_does_not_propose_it_again(
    shell: InteractiveShell,
) -> None:
    from deerflow_nb.notebook.session import get_session

    ask = "Please write code to plot bmi against age"
    final_html(shell, "-t plots", ask)
    first = shell.rl_next_input
    assert first and first.startswith("# Proposed by the offline model")
    shell.rl_next_input = None  # the front end took it: the cell is in the notebook
    journal = get_session(shell).memory.journal
    assert len(journal.turns("plots")) == 1
    reply = shell.user_ns["_agent"]

    _, plain = final_html(shell, "-t plots -o again", ask)  # the same cell, run again
    assert shell.rl_next_input is None  # no second copy of the proposal
    assert len(journal.turns("plots")) == 1  # and no duplicate turn
    assert plain.splitlines()[0].startswith("- → propose_cell(code: ")
    assert "shown again from the journal, not run" in plain.splitlines()[-1]
    assert shell.user_ns["again"] == shell.user_ns["_agent"] == reply

    final_html(shell, "-t plots", ask + " and colour by sex")  # an edited message asks anew
    assert shell.rl_next_input and len(journal.turns("plots")) == 2
    shell.rl_next_input = None
    # The first cell run again after another turn (issue 37): shown again, not re-sent,
    # and its footer still names the project the turn ran in.
    _, plain = final_html(shell, "-t plots", ask)
    assert shell.rl_next_input is None and len(journal.turns("plots")) == 2
    footer = plain.splitlines()[-1]
    assert "shown again from the journal, not run" in footer
    assert f"· project {get_session(shell).project.name}" in footer
    final_html(shell, "-t plots --new", ask)  # and so does --new, in a new thread
    assert shell.rl_next_input and len(journal.turns("plots-2")) == 1


def test_re_running_a_cell_without_a_proposal_runs_a_new_turn(shell: InteractiveShell) -> None:
    from deerflow_nb.notebook.session import get_session

    final_html(shell, "-t chat --no-memory", "Tell me about rivers")
    final_html(shell, "-t chat --no-memory", "Tell me about rivers")
    assert len(get_session(shell).memory.journal.turns("chat")) == 2
