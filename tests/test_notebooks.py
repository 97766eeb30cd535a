"""The example notebooks run top to bottom in a real kernel, on the offline model, no key.

Each notebook's source is ``example_notebooks/NAME.md`` (jupytext MyST); it is converted
with jupytext and executed by nbclient in the venv's ``python3`` kernel. The kernel
inherits ``DEERFLOW_NB_EXAMPLE_HOME``, the one name an example takes its home from (the
test's temporary ``home``), and a ``DEERFLOW_NB_HOME`` that points at a reader's own
memory (facts, a config and a journal): every notebook must leave that home byte for byte
as it was. The assertions look at what the notebook printed (cells are found by their
tags) and at the files it left in its home: memory.json and journal.db.

Every notebook there runs: one with a ``test_<stem>`` function below is checked by it, any
other (a notebook added later) by ``test_notebook_runs``.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import nbformat
import pytest
from journal_rows import memory_json
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "example_notebooks"
sys.path.insert(0, str(ROOT / "scripts"))
import sync_notebooks  # noqa: E402

NOTEBOOKS = [p.name for p in sync_notebooks.sources(NOTEBOOK_DIR)]
# Notebooks checked in a module of their own, which starts what they need.
CHECKED_ELSEWHERE = {"class_memory.md": "test_class_notebook.py (a PostgreSQL)"}
CELL_TIMEOUT = 120


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by relative path, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture(autouse=True)
def readers_own_home(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A reader's own memory behind ``DEERFLOW_NB_HOME``: a config, a fact typed by hand
    (about DuckDB, which memory_tour forgets in its own home) and a journal. The examples
    get ``home`` through ``DEERFLOW_NB_EXAMPLE_HOME``; afterwards the reader's home must be
    byte for byte as it was, with no file added or removed."""
    from deerflow_nb import Memory

    own = tmp_path / "readers-own-home"
    own.mkdir()
    (own / "config.yaml").write_text("memory:\n  max_facts: 200\n  debounce_seconds: 5\n")
    mem = Memory(home=own)
    mem.add_fact("Uses DuckDB for local analytics at work", category="knowledge")
    mem.add_fact("Prefers short answers with code", category="preference")
    mem.close()
    monkeypatch.setenv("DEERFLOW_NB_HOME", str(own))
    monkeypatch.setenv("DEERFLOW_NB_EXAMPLE_HOME", str(home))
    before = tree(own)
    assert "memory.json" in before and "journal.db" in before
    yield own
    assert tree(own) == before, "an example notebook changed the reader's own memory"


def load(name: str) -> nbformat.NotebookNode:
    """The notebook ``name`` (``quickstart``, ``quickstart.md`` or ``quickstart.ipynb``),
    read from its ``.md`` source through jupytext."""
    return sync_notebooks.read(NOTEBOOK_DIR / f"{Path(name).stem}.md")


def execute(name: str, workdir: Path) -> nbformat.NotebookNode:
    """Run one notebook in a fresh kernel started in ``workdir``; raise on a failing cell."""
    nb = load(name)
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    ).execute()
    return nb


def shown(cell: nbformat.NotebookNode) -> list[dict[str, Any]]:
    """The cell's outputs as a front end shows them: consecutive stream outputs of the same
    stream are one text (a kernel may send ``print``'s words and its newline apart)."""
    merged: list[dict[str, Any]] = []
    for output in cell.get("outputs", []):
        last = merged[-1] if merged else None
        if (
            output.get("output_type") == "stream"
            and last is not None
            and last.get("output_type") == "stream"
            and last.get("name") == output.get("name")
        ):
            last["text"] += output.get("text", "")
        else:
            merged.append(dict(output))
    return merged


def output_text(cell: nbformat.NotebookNode) -> str:
    """Everything a cell showed, as text: streams, results and displays."""
    parts = []
    for output in shown(cell):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif output.get("output_type") in ("execute_result", "display_data"):
            data = output.get("data", {})
            for mime in ("text/markdown", "text/plain"):
                if mime in data:
                    parts.append(data[mime])
                    break
        elif output.get("output_type") == "error":
            parts.append("\n".join(output.get("traceback", [])))
    return "\n".join(parts)


def tagged(nb: nbformat.NotebookNode, tag: str) -> str:
    """The output text of the cell(s) carrying ``tag``; the tag must exist."""
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert cells, f"no cell tagged {tag!r}"
    return "\n".join(output_text(c) for c in cells)


def query(home: Path, sql: str, *params: Any) -> list[dict[str, Any]]:
    with closing(sqlite3.connect(home / "journal.db")) as con:
        con.row_factory = sqlite3.Row
        return [dict(row) for row in con.execute(sql, params)]


def facts(home: Path) -> list[dict[str, Any]]:
    return memory_json(home)["facts"]


def test_notebooks_are_committed_clean_and_match_their_source() -> None:
    assert set(NOTEBOOKS) >= {
        "quickstart.md",
        "memory_tour.md",
        "subagents_and_summarization.md",
        "real_models.md",
    }
    for name in NOTEBOOKS:
        text = (NOTEBOOK_DIR / name).read_text(encoding="utf-8")
        assert "format_name: myst" in text and "```{code-cell} ipython3" in text, name
        committed = NOTEBOOK_DIR / f"{Path(name).stem}.ipynb"
        assert committed.exists(), f"{committed.name} is missing: run make notebooks"
        nb = nbformat.read(committed, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [], f"{name}: a cell has committed outputs"
                assert cell.execution_count is None, f"{name}: a cell has an execution count"
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sync_notebooks.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_the_quickstart_cheat_sheet_names_every_flag_subcommand_and_notebook() -> None:
    """Issue 37: the cheat sheet had drifted from the parsers and the notebook folder."""
    import dataclasses

    from deerflow_nb.notebook.agent_magic import AgentArgs
    from deerflow_nb.notebook.memory_args import SUBCOMMANDS

    source = (NOTEBOOK_DIR / "quickstart.md").read_text(encoding="utf-8")
    sheet = source[source.index("## Cheat sheet") :]
    for field in dataclasses.fields(AgentArgs):
        flag = field.metadata["spelling"].flags[0]
        assert f"`{flag}" in sheet, f"%%agent {flag} is missing from the cheat sheet"
    for command in SUBCOMMANDS:
        assert f"`{command}`" in sheet, f"%memory {command} is missing from the cheat sheet"
    for notebook in sorted(NOTEBOOK_DIR.glob("*.md")):
        if notebook.stem != "quickstart":
            assert f"`{notebook.stem}.ipynb`" in sheet, f"{notebook.stem} is not in Where next"


def test_tags_survive_the_text_format() -> None:
    """A tag the checks look for is a ``:tags:`` line in the .md and a cell tag after
    conversion, in both the executed notebook and the committed .ipynb."""
    source = (NOTEBOOK_DIR / "quickstart.md").read_text(encoding="utf-8")
    assert ":tags: [fresh-answer]" in source
    for nb in (load("quickstart"), nbformat.read(NOTEBOOK_DIR / "quickstart.ipynb", 4)):
        agent = [c for c in nb.cells if "fresh-answer" in c.metadata.get("tags", [])]
        assert [c.source.splitlines()[0] for c in agent] == ["%%agent -t fresh"]


def test_quickstart(home: Path, tmp_path: Path) -> None:
    nb = execute("quickstart", tmp_path)

    assert str(home) in tagged(nb, "setup"), "the notebook must use the home it was given"
    for turn in tagged(nb, "turn").split("(offline model)")[1:]:
        assert turn.strip()
    assert tagged(nb, "turn").count("(offline model)") >= 2

    remembered = [f["content"] for f in facts(home)]
    assert any("polars" in c.lower() for c in remembered), remembered
    assert any("churn" in c.lower() for c in remembered), remembered
    assert "polars" in tagged(nb, "memory").lower()

    fresh = tagged(nb, "fresh-answer")
    assert "(offline model)" in fresh
    assert "polars" in fresh.lower(), fresh
    assert "polars" not in tagged(nb, "no-memory-answer").lower()
    assert "<memory>" in tagged(nb, "preview")
    assert "polars" in tagged(nb, "memory-json").lower()

    fresh_thread = query(home, "SELECT id, kind FROM threads WHERE id = 'fresh'")
    assert fresh_thread == [{"id": "fresh", "kind": "lead"}]


def test_memory_tour(home: Path, tmp_path: Path) -> None:
    nb = execute("memory_tour", tmp_path)

    roles = [r["role"] for r in query(home, "SELECT role FROM messages WHERE thread_id = 'tour'")]
    assert roles.count("user") == 2 and roles.count("assistant") >= 2
    assert query(home, "SELECT count(*) AS n FROM turns WHERE thread_id = 'tour'")[0]["n"] == 2
    assert "I use DuckDB" in tagged(nb, "messages")
    assert "tour" in tagged(nb, "queue")
    assert "DuckDB" in tagged(nb, "snapshot")
    assert "newFacts" in tagged(nb, "diff") and "DuckDB" in tagged(nb, "diff")

    assert "DuckDB" in tagged(nb, "memory-json")
    assert "<memory>" in tagged(nb, "preview")
    assert "<memory>" in tagged(nb, "preview-context")

    history = tagged(nb, "history").lower()
    assert "add" in history and "remove" in history, history
    assert "remove" in tagged(nb, "events")

    assert "<memory>" in tagged(nb, "preview-budget") and "/ 70 tokens" in tagged(
        nb, "preview-budget"
    )
    budget_block = tagged(nb, "preview-budget").split("<memory>", 1)[1]
    assert "DuckDB" in budget_block, "the relevant fact must survive a small budget"

    # The conversational "Please forget that I use DuckDB" keeps it out of the review diff.
    pending = tagged(nb, "pending").lower()
    assert "polars" in pending and "duckdb" not in pending, pending
    assert "polars" in tagged(nb, "after-approve").lower()

    # After the rollback of the approval: no polars, and the forgotten fact stays gone.
    final = [f["content"].lower() for f in facts(home)]
    assert not any("duckdb" in c for c in final), final
    assert not any("polars" in c for c in final), final
    assert any("churn" in c for c in final), final
    reasons = [r["reason"] for r in query(home, "SELECT reason FROM memory_versions")]
    assert "rollback" in reasons, reasons


def test_subagents_and_summarization(home: Path, tmp_path: Path) -> None:
    nb = execute("subagents_and_summarization", tmp_path)

    describe = tagged(nb, "describe")
    assert "(offline model)" in describe
    assert "describe_variable" in describe
    assert re.search(r"12 rows\D+5 columns|\(12, 5\)", describe), describe  # sales' shape
    tool_rows = query(
        home, "SELECT count(*) AS n FROM messages WHERE thread_id = 'analysis' AND role = 'tool'"
    )
    assert tool_rows[0]["n"] >= 1

    subagents = query(home, "SELECT id, parent_id FROM threads WHERE kind = 'subagent'")
    assert len(subagents) >= 3, subagents
    assert {row["parent_id"] for row in subagents} == {"analysis"}, subagents
    for row in subagents:
        own = query(home, "SELECT role FROM messages WHERE thread_id = ? ORDER BY seq", row["id"])
        assert [r["role"] for r in own][:1] == ["user"] and len(own) >= 2
    assert "subagent" in tagged(nb, "threads")
    queued = query(home, "SELECT thread_id FROM memory_queue")
    assert not any(r["thread_id"].startswith("subagent") for r in queued), queued

    summaries = query(
        home, "SELECT covers_until_seq, content FROM summaries WHERE thread_id='long'"
    )
    assert summaries, "a 5-turn thread with trigger=6 messages must be summarized"
    assert summaries[-1]["covers_until_seq"] >= 1
    assert "churn" in summaries[-1]["content"].lower()
    shown = tagged(nb, "before-after")
    before = int(re.search(r"without summarization: (\d+) messages", shown)[1])
    seen = int(re.search(r"\+ (\d+) recent messages", shown)[1])
    assert seen < before, shown
    assert "<conversation_summary>" in shown
    assert "our churn table has one row per customer" in shown  # only the summary holds it


def test_real_models_over_http(home: Path, tmp_path: Path) -> None:
    nb = execute("real_models", tmp_path)

    settings = tagged(nb, "settings")
    assert "offline model: False" in settings
    assert "loopback-chat" in settings and "loopback-mini" in settings
    assert "http://127.0.0.1:" in settings

    assert "(offline model)" in tagged(nb, "turn")
    after_turn = int(
        re.search(r"requests served so far: (\d+)", tagged(nb, "requests-after-turn"))[1]
    )
    after_flush = int(
        re.search(r"requests served so far: (\d+)", tagged(nb, "requests-after-flush"))[1]
    )
    assert after_turn >= 1
    assert after_flush > after_turn, "the memory model must also be called over HTTP"

    turns = query(home, "SELECT model FROM turns WHERE thread_id = 'real'")
    assert turns and turns[0]["model"] == "loopback-chat"
    assert any("lightgbm" in f["content"].lower() for f in facts(home))

    cached = query(home, "SELECT model, dim FROM embeddings")
    assert cached and all(r["model"].startswith("openai:loopback-embed") for r in cached)
    assert "cached vectors" in tagged(nb, "embeddings")
    assert "LightGBM" in tagged(nb, "fresh-answer")
    total = int(re.search(r"requests served in total: (\d+)", tagged(nb, "requests-total"))[1])
    assert total > after_flush


def test_make_demo_runs_the_quickstart(home: Path, tmp_path: Path) -> None:
    """``python -m deerflow_nb.demo`` as ``make demo`` runs it, in a scratch folder: in a
    fresh ``.demo_home`` each run, never in ``$DEERFLOW_NB_HOME``, with no kernel noise."""
    work = tmp_path / "work"
    (work / "example_notebooks").mkdir(parents=True)
    shutil.copy(NOTEBOOK_DIR / "quickstart.md", work / "example_notebooks")
    (work / ".demo_home").mkdir()
    (work / ".demo_home" / "memory.json").write_text('{"facts": [{"id": "f1", "content": "Old"}]}')
    run = subprocess.run(
        [sys.executable, "-m", "deerflow_nb.demo"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "WARNING" not in run.stderr, run.stderr[-3000:]
    assert list(home.iterdir()) == []  # the demo keeps to .demo_home, whatever is set
    demo_home = work / ".demo_home"
    assert "Old" not in (demo_home / "memory.json").read_text()  # the last demo is gone
    out = run.stdout
    assert "offline model" in out
    executed = work / "example_notebooks" / "quickstart.executed.ipynb"
    assert executed.exists() and str(executed.name) in out
    match = re.search(r"memory:\s+(\S+) \((\d+) facts\)", out)
    assert match, out
    assert Path(match[1]) == demo_home / "memory.json"
    assert int(match[2]) > 0
    assert str(demo_home / "journal.db") in out
    nb = nbformat.read(executed, as_version=4)
    assert "polars" in tagged(nb, "fresh-answer").lower()


def plain_tagged(nb: nbformat.NotebookNode, tag: str) -> str:
    """The ``text/plain`` (and stream) output of the cell(s) carrying ``tag``: the views'
    Markdown escapes punctuation, their plain text reads as written."""
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert cells, f"no cell tagged {tag!r}"
    parts = []
    for cell in cells:
        for output in shown(cell):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            elif "data" in output:
                parts.append(output["data"].get("text/plain", ""))
    return "\n".join(parts)


def test_memory_aging(home: Path, tmp_path: Path) -> None:
    """Issue 20's promises: a one-time instruction left out, use recorded, a stale fact
    proposed then removed on approval, a consolidation with its lineage and rollback, an
    eviction with its reason."""
    nb = execute("memory_aging", tmp_path)
    gate = plain_tagged(nb, "gate")
    assert "added: ['Prefers polars over pandas', 'Uses polars']" in gate
    assert "'Prefers 3 decimals': a one-time instruction" in gate
    usage = plain_tagged(nb, "usage")
    assert "Prefers polars over pandas   injected 2  used 2  confirmed 1" in usage
    stale = plain_tagged(nb, "stale")
    assert "fact_q3report" in stale and "fact_tabs" not in stale
    assert "Proposed for removal as pending change #1" in stale
    assert "still stored: True" in plain_tagged(nb, "stale-approve")
    assert "after approval: False" in plain_tagged(nb, "stale-approve")
    assert "Prefers polars over pandas; their team switched notebooks to polars" in plain_tagged(
        nb, "consolidate"
    )
    lineage = plain_tagged(nb, "lineage")
    assert lineage.count("remove ") == 3 and "merged:" in lineage
    rollback = plain_tagged(nb, "rollback")
    assert "Facts (4)" in rollback and "Uses polars" in rollback
    assert plain_tagged(nb, "order").startswith("     blend: Prefers tabs over spaces <")
    assert "Prefers tabs over spaces → lowest keep score" in plain_tagged(nb, "eviction")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``test_notebook_runs`` gets the notebooks with no ``test_<stem>`` (or ``test_<stem>_…``)
    of their own."""
    if metafunc.definition.name == "test_notebook_runs":
        tests = [n for n in dir(metafunc.module) if n.startswith("test_")]

        def checked(name: str) -> bool:
            stem = Path(name).stem
            return any(t == f"test_{stem}" or t.startswith(f"test_{stem}_") for t in tests)

        others = [n for n in NOTEBOOKS if not checked(n) and n not in CHECKED_ELSEWHERE]
        metafunc.parametrize("name", others or [pytest.param(None, marks=pytest.mark.skip)])


def test_notebook_runs(name: str, home: Path, tmp_path: Path) -> None:
    """A notebook without checks of its own still runs top to bottom without an error,
    and leaves no error output."""
    nb = execute(name, tmp_path)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", output_text(cell)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_teach(name: str) -> None:
    """Each notebook explains itself: a title, and prose between the code."""
    nb = load(name)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    markdown = [c for c in nb.cells if c.cell_type == "markdown"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(markdown) >= len(code) / 3
    first_code = code[0].source
    # Its own home, always: DEERFLOW_NB_EXAMPLE_HOME or a fresh folder, never the reader's.
    assert 'os.environ.get("DEERFLOW_NB_EXAMPLE_HOME")' in first_code
    assert 'os.environ["DEERFLOW_NB_HOME"] = str(HOME)' in first_code
    assert "setdefault" not in first_code


def test_projects(home: Path, tmp_path: Path) -> None:
    """Issue 28's promises: a project found from the folder, facts stored in their project,
    a switch, a question only one project answers, no leak, and managing projects."""
    nb = execute("projects", tmp_path)
    assert f"project {tmp_path.name} (folder)" in plain_tagged(nb, "found")
    facts = plain_tagged(nb, "churn-facts")
    assert "Prefers polars over pandas" in facts and "user" in facts
    assert facts.count("project churn") == 2 and "decimals" not in facts
    clinic = plain_tagged(nb, "ask-clinic")
    assert "readmitted" in clinic and "churned" not in clinic and "project clinic" in clinic
    preview = plain_tagged(nb, "preview")
    assert "readmitted" in preview and "polars" in preview and "churned" not in preview
    churn = plain_tagged(nb, "ask-churn")
    assert "churned" in churn and "readmitted" not in churn and "project churn" in churn
    leak = plain_tagged(nb, "leak")
    assert leak.count("other project's fact injected: False") == 2
    assert leak.count("your preference injected: True") == 2
    assert "clinic (this notebook)" in plain_tagged(nb, "projects")
    assert "project churn" in plain_tagged(nb, "search-all")
    assert "project clinic" in plain_tagged(nb, "search-all")
    assert "Renamed project churn to telecom-churn (2 facts moved)" in plain_tagged(nb, "rename")
    assert "waits as pending change" in plain_tagged(nb, "forget")
