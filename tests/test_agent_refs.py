"""jupyter-ai's references in ``%%agent`` (issue 30): ``{expression}``, ``{In[n]}``,
``{Out[n]}`` and ``{Err[n]}`` with ``-i``, and ``--error`` for the last failed cell, in a
real InteractiveShell loaded with ``%load_ext``."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from deerflow_nb.notebook.agent_magic import interpolate
from deerflow_nb.notebook.session import get_session


def sent(shell: InteractiveShell, source: str) -> str:
    """Run one cell; the message its turn sent to the model."""
    with capture_output():
        result = shell.run_cell(source)
    assert result.success, result.error_in_exec
    return get_session(shell).agent().last_turn.messages[0]["content"]


def one_line_error(shell: InteractiveShell, source: str) -> str:
    with capture_output() as cap:
        result = shell.run_cell(source)
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    lines = [ln for ln in cap.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, cap.stderr
    return lines[0]


def test_expressions_expand_only_with_i(shell: InteractiveShell) -> None:
    shell.run_cell("diab = list(range(442))")
    body = "There are {len(diab)} rows; the first is {diab[0]}; {'a': 1} stays"
    assert sent(shell, f"%%agent --no-memory\n{body}") == body
    expanded = sent(shell, f"%%agent --no-memory -i\n{body}")
    assert expanded == "There are 442 rows; the first is 0; {'a': 1} stays"


def test_in_out_and_err_refer_to_cells(shell: InteractiveShell) -> None:
    with capture_output():
        shell.run_cell("6 * 7", store_history=True)  # a result: Out[n]
        number = shell.execution_count - 1
        shell.run_cell("int('x')", store_history=True)  # an error: Err[n]
    failed = shell.execution_count - 1
    message = sent(
        shell,
        f"%%agent --no-memory -i\nsource {{In[{number}]}} gave {{Out[{number}]}}; "
        f"then: {{Err[{failed}]}}",
    )
    assert message.startswith("source 6 * 7 gave 42; then: Traceback")
    assert "ValueError: invalid literal for int() with base 10: 'x'" in message
    assert "interactiveshell.py" not in message  # IPython's own frames are left out


def test_a_failing_reference_is_one_line(shell: InteractiveShell) -> None:
    line = one_line_error(shell, "%%agent -i\nrows: {len(nope)}")
    assert "{len(nope)} failed (NameError: name 'nope' is not defined)" in line
    assert "write {{…}} for literal braces" in line
    line = one_line_error(shell, "%%agent -i\ncell {Err[999]}")
    assert "{Err[999]} failed (KeyError: 999)" in line
    assert "no variable named 'missing'" in one_line_error(shell, "%%agent -i\n{missing}")


def test_interpolate_leaves_what_is_no_expression() -> None:
    ns = {"x": 2}
    text = 'f"{x!r}", {1: 2}, {"k": [1]}, {{x}}, {x + 1}'
    assert interpolate(text, ns) == 'f"{x!r}", {1: 2}, {"k": [1]}, {x}, 3'
    with pytest.raises(UsageError, match=r"\{1 / 0\} failed \(ZeroDivisionError"):
        interpolate("{1 / 0}", ns)
    # Braces that start like code but do not compile were meant as code (issue 37).
    for broken in ("{len(}", "{df[}", "{df.}"):
        with pytest.raises(UsageError, match=r"is not a Python expression .*literal braces"):
            interpolate(f"rows: {broken}", ns)


def test_error_explains_the_last_failed_cell_with_its_traceback(shell: InteractiveShell) -> None:
    with capture_output():
        shell.run_cell("def ratio(a, b):\n    return a / b\n\nratio(1, 0)", store_history=True)
    message = sent(shell, "%agent --no-memory --error")  # the line form: no body needed
    assert message.startswith("Explain this error and how to fix it.")
    assert "def ratio(a, b):" in message  # the cell's source
    assert "ZeroDivisionError: division by zero" in message
    assert "return a / b" in message  # the traceback's frames
    asked = sent(shell, "%%agent --no-memory --error\nIs b ever zero on purpose?")
    assert asked.startswith("Explain this error") and asked.endswith("on purpose?")


def test_error_with_no_failed_cell_says_what_to_do(shell: InteractiveShell) -> None:
    import sys

    from deerflow_nb.notebook.cell_refs import cell_errors

    cell_errors(shell).clear()
    for name in ("last_value", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    for _ in range(2):  # its own error is not taken for the last failed cell
        line = one_line_error(shell, "%agent --error")
        assert "no cell has failed yet; run the failing cell, then ask again" in line


# -- the offline model answers from what the error or the output says (issue 37) -----------
def reply(shell: InteractiveShell, source: str) -> str:
    """Run one ``%%agent`` cell; the reply its turn ended with."""
    with capture_output():
        result = shell.run_cell(source)
    assert result.success, result.error_in_exec
    return get_session(shell).agent().last_turn.messages[-1]["content"]


def test_the_offline_model_explains_an_error_from_its_traceback(shell: InteractiveShell) -> None:
    with capture_output():
        shell.run_cell("import pandas as pd\ndf = pd.DataFrame({'color': ['r'], 'size': [1]})")
        shell.run_cell("x = 1\ny = 2\ndf['colour'].value_counts()", store_history=True)
    failed = shell.execution_count - 1
    for source in ("%agent --error", f"%%agent -i\nWhy did this fail? {{Err[{failed}]}}"):
        answer = reply(shell, source)
        assert "raised KeyError: 'colour' at line 3" in answer
        assert "`df['colour'].value_counts()`" in answer
        assert "`df`'s columns are color, size: did you mean 'color'?" in answer
        assert "Here is what the tools returned" not in answer  # not a description of df


def test_the_offline_model_names_the_function_and_a_near_variable(
    shell: InteractiveShell,
) -> None:
    with capture_output():
        shell.run_cell("def ratio(a, b):\n    return a / b\n\nratio(1, 0)", store_history=True)
        divided = shell.execution_count - 1
        shell.run_cell("total = 3\nprint(totl)", store_history=True)
        misspelt = shell.execution_count - 1
    answer = reply(shell, f"%%agent -i\n{{Err[{divided}]}}")
    assert "ZeroDivisionError: division by zero at line 4: `ratio(1, 0)`" in answer
    assert "inside `ratio`, at line 2: `return a / b`" in answer
    answer = reply(shell, f"%%agent -i\n{{Err[{misspelt}]}}")
    assert "NameError: name 'totl' is not defined" in answer
    assert "The notebook has `total`: did you mean it?" in answer


def test_the_offline_model_describes_an_output_by_its_kind_and_shape(
    shell: InteractiveShell,
) -> None:
    cells = {
        "import pandas as pd, numpy as np\n"
        "pd.DataFrame({'size': [1, 2], 'w': [3.0, 4.0]}).describe()": (
            "a table (a DataFrame's text) of 8 rows × 2 columns; its columns: size, w; "
            "its rows are count, mean, std, min, 25%, 50%, 75%, max: summary statistics"
        ),
        "pd.Series([1, 2, 3], name='size')": "a Series named size of dtype int64, 3 values",
        "np.arange(6).reshape(2, 3)": "a NumPy array of shape (2, 3)",
        "pd.DataFrame({'a': range(100)})": "a table (a DataFrame's text) of 100 rows × 1 column",
        "[1, 2, 3]": "a list of 3 items",
    }
    for code, said in cells.items():
        with capture_output():
            shell.run_cell(code, store_history=True)
        number = shell.execution_count - 1
        assert said in reply(shell, f"%%agent -i\nWhat is this? {{Out[{number}]}}")
