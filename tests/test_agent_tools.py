"""Notebook tools against a real InteractiveShell and real pandas / numpy objects."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from deerflow_nb.agent.notebook_tools import NotebookTools
from deerflow_nb.agent.tools import tool_specs


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
        "import sys, deerflow_nb.agent, deerflow_nb.notebook.agent_magic;"
        "print(sorted(m for m in ('pandas', 'openai', 'streamlit') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- propose_cell --------------------------------------------------------------------------
def test_agent_proposes_code_into_the_next_cell_without_running_it(
    shell: InteractiveShell,
) -> None:
    shell.rl_next_input = None
    with capture_output():
        shell.run_cell("%%agent --no-memory\nwrite code to load sales.csv and plot revenue")
    proposed = shell.rl_next_input  # what a terminal prefills; a kernel sends it as a payload
    assert proposed and "Proposed by the offline model for: load sales.csv and plot revenue" in (
        proposed
    )
    assert "def load_sales_csv_plot():" in proposed
    compile(proposed, "<proposed>", "exec")  # valid Python
    assert "load_sales_csv_plot" not in shell.user_ns  # proposed, not run
    reply = shell.user_ns["_agent"]
    assert "propose_cell: Proposed a new cell below" in reply and "not been run" in reply


def test_proposals_of_one_turn_are_combined_and_only_the_lead_proposes(
    shell: InteractiveShell,
) -> None:
    import threading

    shell.rl_next_input = None
    tools = NotebookTools(shell.user_ns, shell)
    assert "propose_cell" in tools.names and "run_code" not in tools.names  # on by default
    assert "propose_cell" not in tools.read_only().names  # sub-agents
    assert "propose_cell" not in NotebookTools({}, None).names  # no notebook to put it in
    assert tools.call("propose_cell", {"code": "a = 1\n"}).startswith("Proposed a new cell")
    second = tools.call("propose_cell", {"code": "b = 2"})
    assert "all 2 proposals" in second
    assert shell.rl_next_input == "a = 1\n\nb = 2"
    assert tools.call("propose_cell", {"code": "  "}).startswith("Error:")
    results: list[str] = []
    worker = threading.Thread(
        target=lambda: results.append(tools.call("propose_cell", {"code": "c"}))
    )
    worker.start()
    worker.join()
    assert results == ["Error: propose_cell works only in the lead agent"]
    assert shell.rl_next_input == "a = 1\n\nb = 2"


def test_a_kernel_sends_the_proposal_as_a_set_next_input_payload(tmp_path) -> None:
    """In a real kernel (what JupyterLab talks to) the proposal is the execute reply's
    ``set_next_input`` payload, which makes the front end insert the cell below."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        client.execute_interactive("%load_ext deerflow_nb", timeout=60)
        reply = client.execute_interactive(
            "%%agent --no-memory\nWrite a function that counts rows per region",
            timeout=60,
            output_hook=lambda msg: None,
        )
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok"
    payloads = [p for p in reply["content"]["payload"] if p.get("source") == "set_next_input"]
    assert len(payloads) == 1 and payloads[0]["replace"] is False
    assert "def counts_rows_region():" in payloads[0]["text"]


def test_without_a_kernel_the_tools_and_the_agent_say_what_they_cannot_see() -> None:
    """The chat panel's persona runs the agent with ``kernel=False``: asked about variables
    or cells, the tools answer that no kernel is there, never "no variables yet"."""
    from deerflow_nb import Agent
    from deerflow_nb.agent.notebook_tools import NO_KERNEL

    tools = NotebookTools({}, kernel=False)
    for name, arguments in (
        ("list_variables", {}),
        ("describe_variable", {"name": "df"}),
        ("read_cell", {"number": 1}),
    ):
        assert tools.call(name, arguments) == f"Error: {NO_KERNEL}"
    assert tools.read_only().call("list_variables", {}) == f"Error: {NO_KERNEL}"

    agent = Agent(namespace={}, kernel=False)
    try:
        reply = agent.run("What variables do I have? Describe df.", thread="chat")
        assert "no notebook kernel here" in reply
        assert "deerflow_nb, an assistant in JupyterLab's chat panel" in str(
            agent.last_turn.model_view[0]["content"]
        )
    finally:
        agent.close()
