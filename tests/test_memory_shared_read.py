"""Injection reads memory.json once per revision, yet always sees the latest revision."""

from __future__ import annotations

import json

from deerflow_nb import Memory


def test_preview_sees_a_change_written_by_another_memory_instance() -> None:
    reader = Memory()
    writer = Memory()
    reader.add_fact("Prefers polars over pandas", category="preference")
    revision, first = reader.store.read_shared()
    assert reader.store.read_shared() == (revision, first)
    assert reader.store.read_shared()[1] is first  # parsed once for this revision

    writer.add_fact("Deploys models with BentoML", category="knowledge")
    assert "BentoML" in reader.preview()
    assert reader.store.read_shared()[1] is not first


def test_a_hand_edited_file_is_read_again() -> None:
    mem = Memory()
    mem.add_fact("Uses DuckDB for local SQL", category="behavior")
    assert "DuckDB" in mem.preview()
    data = json.loads(mem.path.read_text())
    data["facts"][0]["content"] = "Uses SQLite for local SQL"
    mem.path.write_text(json.dumps(data))
    assert "SQLite" in mem.preview()
    assert "DuckDB" not in mem.preview()


def test_deleting_memory_json_resets_what_is_injected() -> None:
    mem = Memory()
    mem.add_fact("Works on the churn model", category="context")
    assert mem.preview()
    mem.path.unlink()
    assert mem.preview() == ""


def test_a_pinned_revision_skips_the_fingerprint_but_not_a_new_revision() -> None:
    from deerflow_nb.memory.retrieval import fact_index

    mem = Memory()
    mem.add_fact("Prefers polars over pandas", category="preference")
    mem.preview("polars")
    builds = fact_index.builds
    for _ in range(3):
        assert "polars" in mem.preview("polars")
    assert fact_index.builds == builds  # one index for the revision
    mem.add_fact("Deploys with BentoML", category="knowledge")
    assert "BentoML" in mem.preview("BentoML")
    assert fact_index.builds == builds + 1
