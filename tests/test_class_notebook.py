"""The teaching notebook ``example_notebooks/class_memory.md`` (issue 39) runs top to
bottom in a real kernel against a real PostgreSQL (``pg_cluster.py``, a database of its
own): the student's agent answers from the teacher's course facts, the student's change
to the course is refused in one line, and no other cell fails.

It is checked here rather than in ``test_notebooks.py`` because it needs the server.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import psycopg
import pytest
from nbclient.exceptions import CellExecutionError
from pg_cluster import PgCluster
from test_notebooks import NOTEBOOK_DIR, execute, output_text, tagged

from deerflow_nb import Memory


@pytest.fixture
def class_url(postgres: PgCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """``DEERFLOW_NB_CLASS_URL``: the superuser on a new database, as a teacher's would be."""
    database = f"class_{secrets.token_hex(4)}"
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    url = postgres.url_for("deerflow_admin", postgres.password, database)
    monkeypatch.setenv("DEERFLOW_NB_CLASS_URL", url)
    return url


def test_class_memory(
    class_url: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEERFLOW_NB_EXAMPLE_HOME", str(home))
    own = tmp_path / "readers-own-home"  # a reader's memory the notebook must not touch
    own.mkdir()
    monkeypatch.setenv("DEERFLOW_NB_HOME", str(own))
    nb = execute("class_memory", tmp_path)

    for cell in nb.cells:
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors or "refused" in cell.metadata.get("tags", []), output_text(cell)
    assert tagged(nb, "enrol").count("read-only member of course") == 2
    assert "published 1" in tagged(nb, "share")  # the three facts, one change set
    assert "The target column is tip_amount  (from teacher_" in tagged(nb, "ben")
    assert "applied 1" in tagged(nb, "join")

    answer = tagged(nb, "answer")
    assert "(offline model)" in answer and "tip_amount" in answer, answer
    refusal = tagged(nb, "refused").strip()
    assert refusal.startswith("UsageError: %memory add: ada_"), refusal
    assert "is a read-only member of shared project course" in refusal
    assert "\n" not in refusal
    assert "Team sync" in tagged(nb, "sync")  # applied here, or already by a background sync
    assert "cash" in tagged(nb, "answer-cash").lower()

    with Memory(home) as ada:
        course = {f["content"] for f in ada.data["facts"] if f.get("project") == "course"}
        assert "The target column is tip_amount" in course
        assert "The target column is fare_amount" not in course
        assert "I plot with seaborn" in {f["content"] for f in ada.data["facts"]}
    for path in home.rglob("*"):  # the URL is kept, its password never
        if path.is_file():
            assert not re.search(rb"postgresql://ada_[0-9a-f]{4}:", path.read_bytes()), path
    with psycopg.connect(class_url) as conn:
        texts = [row[0] for row in conn.execute("SELECT payload::text FROM deerflow.change_sets")]
    assert not any("fare_amount" in t or "seaborn" in t for t in texts), texts
    assert list(own.iterdir()) == []


def test_class_memory_without_a_server_says_how_to_start_one(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEERFLOW_NB_CLASS_URL", raising=False)
    monkeypatch.setenv("DEERFLOW_NB_EXAMPLE_HOME", str(home))
    with pytest.raises(CellExecutionError) as stopped:
        execute("class_memory", tmp_path)
    assert "UsageError: no PostgreSQL: set DEERFLOW_NB_CLASS_URL" in str(stopped.value)
    said = (NOTEBOOK_DIR / "class_memory.md").read_text(encoding="utf-8")
    assert "**Without one, start one and set its URL before starting Jupyter:**" in said
