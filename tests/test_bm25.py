"""BM25's scores against the formula written out (Lucene's variant, as ``bm25.py`` says)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deerflow_nb.memory.retrieval.bm25 import BM25, BM25_B, BM25_K1

WORDS = [f"w{i}" for i in range(6)]
IDS = {word: number for number, word in enumerate(WORDS)}


def reference(documents: list[list[str]], query: list[str]) -> list[float]:
    """Each document's score, term after term (a repeated term counts again)."""
    n = len(documents)
    lengths = [max(len(d), 1) for d in documents]
    mean = sum(lengths) / n
    scores = [0.0] * n
    for term in query:
        df = sum(term in d for d in documents)
        if df == 0:
            continue
        idf = math.log1p((n - df + 0.5) / (df + 0.5))
        for i, document in enumerate(documents):
            tf = document.count(term)
            if tf:
                norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths[i] / mean)
                scores[i] += idf * tf / (tf + norm)
    return scores


@settings(max_examples=150, deadline=None)
@given(
    documents=st.lists(st.lists(st.sampled_from(WORDS), max_size=6), min_size=1, max_size=12),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), max_size=5),
)
def test_scores_are_the_formulas(documents: list[list[str]], query: list[str]) -> None:
    arrays = [np.array([IDS[w] for w in d], dtype=np.int64) for d in documents]
    index, _ = BM25.with_windows(IDS, arrays, np.full(len(documents), -1), 0)
    assert index is not None
    scores = index.get_scores(query)
    assert scores.shape == (len(documents),)
    assert scores.tolist() == pytest.approx(reference(documents, query), rel=1e-12, abs=1e-15)


@settings(max_examples=100, deadline=None)
@given(
    documents=st.lists(st.lists(st.sampled_from(WORDS), max_size=6), min_size=1, max_size=40),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), max_size=6),
)
def test_scores_are_the_terms_added_one_at_a_time_bit_for_bit(
    documents: list[list[str]], query: list[str]
) -> None:
    """One ``bincount`` over the terms' postings gives exactly the floats of adding the
    terms one at a time (the order the formula adds them in), on the facts and on their
    windows, and asking again gives the same (the index keeps its term rows)."""
    arrays = [np.array([IDS[w] for w in d], dtype=np.int64) for d in documents]
    index, windows = BM25.with_windows(IDS, arrays, np.zeros(len(documents), dtype=int), 1)
    for bm25 in (index, windows):
        assert bm25 is not None
        by_postings = np.zeros(len(documents))
        for row in bm25.ids(query):
            start, end = bm25.indptr[row], bm25.indptr[row + 1]
            one = np.zeros(len(documents))
            one[bm25.docs[start:end]] = bm25.weights[start:end]
            by_postings += one
        first, again = bm25.get_scores(query), bm25.get_scores(query)
        assert first.tolist() == again.tolist() == by_postings.tolist()
