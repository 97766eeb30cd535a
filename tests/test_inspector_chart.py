"""The inspector's confidence chart under Streamlit's AppTest (issue 30): fifteen facts in
fifteen colours, no overlapping marks that read as a shape the legend lacks, and facts
merged away named by their own text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from inspector_seed import quiet_memory
from streamlit.testing.v1 import AppTest

from deerflow_nb.inspector.tabs.history import LEGEND_MAX

APP = Path(__file__).resolve().parents[1] / "inspector_app.py"
TABLEAU20 = 20  # colours in the scheme the chart names
SHORT, LONG = "Prefers polars over pandas", "Prefers polars over pandas for data frames"


@pytest.fixture
def merged_home(home: Path) -> dict[str, Any]:
    """Twelve facts, then two near-duplicates the consolidation merges: 15 facts charted."""
    mem = quiet_memory(home)
    try:
        for i in range(12):
            mem.add_fact(f"Fact number {i} about topic {i}", confidence=0.5 + i * 0.03)
        # Folded, not typed: a merge of facts the user added by hand waits for approval.
        mem.apply(
            {"newFacts": [{"content": LONG, "category": "preference", "confidence": 0.8},
                          {"content": SHORT, "category": "preference", "confidence": 0.7}]},
            source="thread-polars",
        )  # fmt: skip
        ids = {f["content"]: f["id"] for f in mem.data["facts"]}
        (merged,) = mem.consolidate().merged
    finally:
        mem.close()
    return {"long": ids[LONG], "short": ids[SHORT], "merged": merged["id"]}


def chart(home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[AppTest, dict, Any]:
    monkeypatch.setenv("DEERFLOW_NB_HOME", str(home))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    element = at.get("vega_lite_chart")[0]
    spec = json.loads(element.proto.spec)
    (dataset,) = element.proto.datasets
    points = pa.ipc.open_stream(dataset.data.data).read_all().to_pandas()
    return at, spec, points


def test_fifteen_facts_get_fifteen_colours_and_a_legend(
    home: Path, merged_home: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, spec, points = chart(home, monkeypatch)
    facts = points["fact"].nunique()
    assert facts == 15 <= LEGEND_MAX < TABLEAU20
    for layer in spec["layer"]:
        color = layer["encoding"]["color"]
        assert color["scale"] == {"scheme": "tableau20"} and color["legend"] is not None
        assert layer["encoding"]["y"]["axis"]["offset"] >= 8  # no mark over a tick label


def test_two_chosen_facts_get_two_distinct_hues(
    home: Path, merged_home: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: tableau20 gave two chosen facts its blue and its pale blue."""
    at, _, _ = chart(home, monkeypatch)
    picker = at.multiselect(key="history_facts")
    picker.set_value(list(picker.options[:2])).run()
    element = at.get("vega_lite_chart")[0]
    spec = json.loads(element.proto.spec)
    for layer in spec["layer"]:
        assert layer["encoding"]["color"]["scale"] == {"scheme": "tableau10"}


def test_marks_of_one_moment_sit_apart_and_every_shape_is_in_the_legend(
    home: Path, merged_home: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, spec, points = chart(home, monkeypatch)
    marks = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    shape = marks["encoding"]["shape"]
    assert shape["scale"]["domain"] == ["added", "changed", "removed"]
    assert shape["legend"] is not None and set(points["event"]) <= set(shape["scale"]["domain"])
    # the merged-away fact's removal and its addition: same minute, same confidence
    mine = points[points["fact_id"] == merged_home["long"]]
    assert list(mine["event"]) == ["added", "removed"]
    assert mine["confidence"].nunique() == 1 and mine["offset"].nunique() == 2
    # the offset moves the drawn time (the x field), not only a hidden column
    assert marks["encoding"]["x"]["field"] == "shown_ts"
    (calc,) = [t for layer in spec["layer"] for t in layer.get("transform", [])][:1]
    assert calc["as"] == "shown_ts" and "datum.offset" in calc["calculate"]


def test_a_fact_merged_away_is_named_by_its_own_text(
    home: Path, merged_home: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    at, _, points = chart(home, monkeypatch)
    options = at.multiselect(key="history_facts").options
    assert f"{merged_home['short']}: {SHORT}" in options  # not the text it merged into
    assert f"{merged_home['long']}: {LONG}" in options
    assert f"{merged_home['merged']}: {LONG}" in options
    labels = set(points.loc[points["fact_id"] == merged_home["short"], "fact"])
    assert labels == {f"{merged_home['short']}: {SHORT}"}
