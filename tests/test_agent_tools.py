"""Notebook tools against a real InteractiveShell and real pandas / numpy objects."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from deerflow_nb.agent.tools import NotebookTools, tool_specs


def test_list_variables_shows_user_data_only(shell: InteractiveShell) -> None:
    shell.run_cell("import math\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})")
    shell.run_cell("xs = [1, 2, 3]\n_hidden = 1\ndef f(): pass")
    text = NotebookTools(shell.user_ns, shell).list_variables()
    assert "df: pandas.DataFrame, shape (2, 1)" in text
    assert "xs: list, len 3" in text
    names = [line.split(":")[0] for line in text.splitlines()]
    assert names == ["df", "xs"]  # no modules, functions or underscore names
    assert NotebookTools({}, None).list_variables() == "No user variables are defined yet."


def test_describe_a_dataframe() -> None:
    df = pd.DataFrame({"city": ["Oslo", "Lima", None], "temp": [3.5, np.nan, 21.0]})
    text = NotebookTools({"weather": df}).describe_variable("weather")
    assert "pandas DataFrame, 3 rows x 2 columns" in text
    assert "temp: float64" in text
    assert "missing values: city: 1, temp: 1" in text
    assert "Oslo" in text and "head:" in text


def test_describe_arrays_dicts_lists_and_scalars() -> None:
    tools = NotebookTools(
        {
            "arr": np.arange(6).reshape(2, 3),
            "cfg": {"lr": 0.1, "epochs": 3},
            "names": ["a", 1],
            "n": 7,
        }
    )
    assert "shape (2, 3), dtype int64" in tools.describe_variable("arr")
    assert "min 0, max 5" in tools.describe_variable("arr")
    assert "dict with 2 keys" in tools.describe_variable("cfg")
    assert "list of 2 items (types: int, str)" in tools.describe_variable("names")
    assert "n: int" in tools.describe_variable("n")
    series = pd.Series([1, None], name="s")
    assert "pandas Series 's', 2 values" in NotebookTools({"s": series}).describe_variable("s")


def test_unknown_names_and_tools_return_errors_the_model_can_read() -> None:
    tools = NotebookTools({"df": 1})
    assert tools.call("describe_variable", {"name": "dff"}).startswith(
        "Error: no variable named 'dff' (variables: df)"
    )
    assert tools.call("run_code", {"code": "1"}).startswith("Error: unknown tool 'run_code'")
    assert tools.call("describe_variable", {"nam": "df"}).startswith("Error: bad arguments")


class Lazy:
    """A lazy query object: asking its size or for its repr runs (and fails) the query."""

    def __len__(self) -> int:
        raise RuntimeError("query not executed yet")

    def __repr__(self) -> str:
        raise RuntimeError("query not executed yet")


def test_an_object_that_fails_when_inspected_does_not_break_the_tools() -> None:
    tools = NotebookTools({"q": Lazy(), "xs": [1, 2]})
    listed = tools.call("list_variables", {})
    assert "q: test_agent_tools.Lazy\n" in listed and "xs: list, len 2" in listed
    described = tools.call("describe_variable", {"name": "q"})
    assert not described.startswith("Traceback") and "query not executed yet" in described


def test_read_cell_source_and_output(shell: InteractiveShell) -> None:
    shell.run_cell("x = 40", store_history=True)
    shell.run_cell("x + 2", store_history=True)
    tools = NotebookTools(shell.user_ns, shell)
    assert tools.read_cell(1) == "x = 40"
    assert tools.read_cell(2, "output") == "42"
    assert "has no output value" in tools.read_cell(1, "output")
    assert tools.call("read_cell", {"number": 9}).startswith("Error: no cell [9]")


def test_run_code_is_off_by_default_and_shows_code_before_running(
    shell: InteractiveShell,
) -> None:
    assert "run_code" not in NotebookTools(shell.user_ns, shell).names
    assert "run_code" not in [s["function"]["name"] for s in tool_specs(("list_variables",))]
    shown: list[str] = []
    tools = NotebookTools(shell.user_ns, shell, allow_code=True, show=shown.append)
    with capture_output() as cap:
        result = tools.call("run_code", {"code": "y = 6 * 7\nprint('hi')\ny"})
    assert shown == ["**Running in your kernel:**\n\n```python\ny = 6 * 7\nprint('hi')\ny\n```"]
    assert "stdout:\nhi" in result and "result: 42" in result
    assert shell.user_ns["y"] == 42
    assert "hi" in cap.stdout  # the user sees the output too
    error = tools.call("run_code", {"code": "1 / 0"})
    assert "error: ZeroDivisionError" in error
    assert "run_code" not in tools.read_only().names


def test_importing_the_agent_does_not_import_pandas_or_openai() -> None:
    code = (
        "import sys, deerflow_nb.agent, deerflow_nb.agent.magic;"
        "print(sorted(m for m in ('pandas', 'openai', 'streamlit') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
