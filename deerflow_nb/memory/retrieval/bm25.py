"""BM25 over analysed documents (Lucene's variant, bm25s's parameters) as numpy arrays.

The fact index keeps two per memory revision: one over the facts, one over each fact's
window with its same-day neighbours (see ``fact_index``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# A term's frequency saturates with k1; b normalises by document length: bm25s's defaults.
BM25_K1 = 1.5
BM25_B = 0.75


class BM25:
    """Okapi BM25 over analysed documents, Lucene's variant (bm25s's default: idf
    ``log(1 + (N - df + 0.5) / (df + 0.5))``, term frequency ``tf / (tf + k1 (1 - b + b
    dl / avgdl))``), held as a term-major sparse matrix in numpy.

    Built in a few vectorised passes (no per-document Python beyond mapping words to ids),
    and a query adds one slice per term: at 10,000 facts the build is a few milliseconds
    where a general-purpose library spends most of a second.
    """

    __slots__ = ("lexicon", "terms", "indptr", "docs", "weights", "n", "_pairs", "_rows")

    def __init__(
        self,
        lexicon: tuple[dict[str, int], np.ndarray],
        n: int,
        term: np.ndarray,
        doc: np.ndarray,
        tf: np.ndarray,
        lengths: np.ndarray,
    ) -> None:
        """``(term, doc, tf)`` triples, sorted by term then document, unique; ``lengths``
        per document (at least 1). ``lexicon``: the numbers of all terms (``Lexicon.ids``),
        and, sorted, the numbers of the terms here (``term`` indexes the latter)."""
        self.lexicon, self.terms = lexicon
        self.n = n
        df = np.bincount(term, minlength=len(self.terms))
        self.indptr = np.zeros(len(self.terms) + 1, dtype=np.int64)
        np.cumsum(df, out=self.indptr[1:])
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths / lengths.mean())
        self.docs = doc
        self.weights = idf[term] * tf / (tf + norm[doc])
        self._pairs = (term, doc, tf, lengths)
        self._rows: dict[str, int] = {}  # term -> its row here (-1: no document holds it)

    @classmethod
    def with_windows(
        cls, ids: dict[str, int], documents: list[np.ndarray], day: np.ndarray, width: int
    ) -> tuple[BM25 | None, BM25 | None]:
        """The index of ``documents`` (each an array of term numbers from ``ids``), and the
        index of their windows: each document with its ``width`` neighbours on each side
        that share its ``day`` (>= 0; a document of day -1 is its own window)."""
        n = len(documents)
        if n == 0:
            return None, None
        raw = np.fromiter(map(len, documents), dtype=np.int64, count=n)
        numbers, local = np.unique(np.concatenate(documents), return_inverse=True)
        lexicon = (ids, numbers)
        owner = np.repeat(np.arange(n, dtype=np.int64), raw)
        key, tf = np.unique(local.astype(np.int64) * n + owner, return_counts=True)
        term, doc = np.divmod(key, n)
        # A document with no indexable word still has length 1 (as a placeholder word would).
        index = cls(lexicon, n, term, doc, tf.astype(float), np.maximum(raw, 1).astype(float))
        keys, counts, lengths = [key], [tf], raw.copy()
        for offset in (o for o in range(-width, width + 1) if o):
            # Document j's words also count for document i = j - offset, on the same day.
            target = doc - offset
            ok = (target >= 0) & (target < n)
            ok[ok] &= (day[doc[ok]] >= 0) & (day[target[ok]] == day[doc[ok]])
            keys.append(term[ok] * n + target[ok])
            counts.append(tf[ok])
            j = np.arange(n) + offset
            fine = (j >= 0) & (j < n)
            fine[fine] &= (day[fine] >= 0) & (day[j[fine]] == day[fine])
            lengths[fine] += raw[j[fine]]
        merged, inverse = np.unique(np.concatenate(keys), return_inverse=True)
        window_tf = np.bincount(inverse, weights=np.concatenate(counts).astype(float))
        w_term, w_doc = np.divmod(merged, n)
        windows = cls(lexicon, n, w_term, w_doc, window_tf, np.maximum(lengths, 1).astype(float))
        return index, windows

    def ids(self, terms: Sequence[str]) -> list[int]:
        """The rows of ``terms`` here, leaving out those no document holds (each term
        looked up once per index: a turn asks the same few dozen)."""
        out = []
        for t in terms:
            row = self._rows.get(t)
            if row is None:
                row = self._rows[t] = self._row(t)
            if row >= 0:
                out.append(row)
        return out

    def _row(self, term: str) -> int:
        number = self.lexicon.get(term)
        if number is None:
            return -1
        row = int(np.searchsorted(self.terms, number))
        return row if row < len(self.terms) and self.terms[row] == number else -1

    def get_scores(self, terms: Sequence[str]) -> np.ndarray:
        """BM25 of the query ``terms`` (a repeated term counts again) for every document.

        The terms' postings are summed in one ``bincount``, term after term as a loop of
        ``+=`` would add them (the same sums, bit for bit), without a gather and a scatter
        per term: a word in every fact has a posting per fact."""
        rows = self.ids(terms)
        indptr, docs, weights = self.indptr, self.docs, self.weights
        if not rows:
            return np.zeros(self.n)
        spans = [(indptr[t], indptr[t + 1]) for t in rows]
        return np.bincount(
            np.concatenate([docs[start:end] for start, end in spans]),
            weights=np.concatenate([weights[start:end] for start, end in spans]),
            minlength=self.n,
        )

    def containing(self, term: str) -> np.ndarray:
        """The documents holding ``term``."""
        rows = self.ids([term])
        if not rows:
            return np.zeros(0, dtype=np.int64)
        return self.docs[self.indptr[rows[0]] : self.indptr[rows[0] + 1]]

    def specificity(self) -> np.ndarray:
        """Each document's mean IDF (``log(N / df)`` over its words, repeats included),
        scaled onto [0, 1]; 0 for a document without words."""
        term, doc, tf, lengths = self._pairs
        df = np.diff(self.indptr)
        total = np.bincount(doc, weights=tf * np.log(self.n / df[term]), minlength=self.n)
        words = np.bincount(doc, weights=tf, minlength=self.n)
        mean_idf = np.divide(total, words, out=np.zeros(self.n), where=words > 0)
        return min_max(mean_idf)


def min_max(values: np.ndarray) -> np.ndarray:
    """``values`` mapped onto [0, 1] for this query (all zeros when they are all equal)."""
    if values.size == 0:
        return np.zeros(0)
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.zeros(len(values))
    return (values - low) / (high - low)
