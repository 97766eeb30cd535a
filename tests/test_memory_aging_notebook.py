"""``example_notebooks/memory_aging.md`` (jupytext MyST) runs top to bottom on the offline
model in a real kernel, and shows what issue 20 promises: a one-time instruction left out,
use recorded, a stale fact proposed then removed on approval, a consolidation with its
lineage and rollback, an eviction with its reason."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "example_notebooks" / "memory_aging.md"
jupytext = pytest.importorskip("jupytext")


def text_of(nb: nbformat.NotebookNode, tag: str) -> str:
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert cells, f"no cell tagged {tag!r}"
    parts = []
    for cell in cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            elif "data" in output:
                parts.append(output["data"].get("text/plain", ""))
            elif output.get("output_type") == "error":
                parts.append("\n".join(output.get("traceback", [])))
    return "\n".join(parts)


def test_memory_aging_notebook(home: Path, tmp_path: Path) -> None:
    nb = jupytext.read(NOTEBOOK)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    gate = text_of(nb, "gate")
    assert "added: ['Prefers polars over pandas', 'Uses polars']" in gate
    assert "'Prefers 3 decimals': a one-time instruction" in gate
    usage = text_of(nb, "usage")
    assert "Prefers polars over pandas   injected 2  used 2  confirmed 1" in usage
    stale = text_of(nb, "stale")
    assert "fact_q3report" in stale and "fact_tabs" not in stale
    assert "Proposed for removal as pending change #1" in stale
    assert "still stored: True" in text_of(nb, "stale-approve")
    assert "after approval: False" in text_of(nb, "stale-approve")
    assert "Prefers polars over pandas; their team switched notebooks to polars" in text_of(
        nb, "consolidate"
    )
    lineage = text_of(nb, "lineage")
    assert lineage.count("remove ") == 3 and "merged:" in lineage
    rollback = text_of(nb, "rollback")
    assert "Facts (4)" in rollback and "Uses polars" in rollback
    assert text_of(nb, "order").startswith("     blend: Prefers tabs over spaces <")
    assert "Prefers tabs over spaces → lowest keep score" in text_of(nb, "eviction")
