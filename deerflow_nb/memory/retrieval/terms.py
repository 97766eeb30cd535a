"""Text into index terms: stems without stopwords, CJK bigrams, named entities, the lexicon.

The shared ``Lexicon`` numbers every term and remembers each text's analysis.

Facts and queries go through the same ``analyze``, so a fact's words and a message's meet
as the same terms; the lexicon lets a new memory revision analyse only its new texts.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...similarity import STOPWORDS

WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)  # a word: letters and digits, any script
# A capitalised word that does not open a sentence: a named entity (``recall`` reads it too).
ENTITY_RE = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+")
_POSSESSIVE_ENTITY_RE = re.compile(ENTITY_RE.pattern + r"(?:'s)?")
_SPACES_RE = re.compile(r"\s+")
# Han, kana and Hangul are written without spaces between words: a run of them becomes its
# overlapping character bigrams (a lone character stays itself), the usual CJK indexing
# (Lucene's CJKAnalyzer), so "北京" matches inside "我在北京工作".
_CJK_RUN_RE = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uffdc]+")


def _stemmer() -> Any:
    """Snowball English (PyStemmer), built once per thread: it is not thread-safe."""
    local = _STEMMERS
    stemmer = getattr(local, "stemmer", None)
    if stemmer is None:
        import Stemmer

        stemmer = local.stemmer = Stemmer.Stemmer("english")
    return stemmer


_STEMMERS = threading.local()


def _cjk_bigrams(match: re.Match[str]) -> str:
    run = match.group(0)
    pieces = [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return f" {' '.join(pieces)} "


def analyze(text: str) -> list[str]:
    """Lowercased word stems without stopwords (CJK as character bigrams): the terms BM25
    indexes and queries."""
    text = text.lower()
    if not text.isascii():
        text = _CJK_RUN_RE.sub(_cjk_bigrams, text)
    words = [w for w in WORD_RE.findall(text) if w not in STOPWORDS]
    return _stemmer().stemWords(words) if words else []


class Lexicon:
    """Every term seen, numbered, and each analysed text's terms and their numbers:
    remembered across revisions (a new revision mostly holds the facts of the last one, so
    only new texts are analysed). Lists and arrays are shared: do not change them."""

    LIMIT = 1 << 16  # texts remembered; past it, a new lexicon starts

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.texts: dict[str, tuple[list[str], np.ndarray]] = {}
        self.lock = threading.Lock()

    def analyze_many(self, texts: Sequence[str]) -> tuple[list[list[str]], list[np.ndarray]]:
        """Each text's terms (``analyze``) and their numbers in this lexicon."""
        known = self.texts
        hits = [known.get(text) for text in texts]
        if None in hits:
            with self.lock:  # numbering new terms must not interleave
                new = list(dict.fromkeys(t for t, h in zip(texts, hits, strict=True) if h is None))
                ids = self.ids
                for text, terms in zip(new, _analyze_batch(new), strict=True):
                    numbers = np.array([ids.setdefault(t, len(ids)) for t in terms], np.int64)
                    known[text] = (terms, numbers)
            hits = [known[text] for text in texts]
        return [h[0] for h in hits], [h[1] for h in hits]


# Joins texts for one pass of the analyser: a word of its own no text holds (else each
# text is analysed alone); U+01C2 is a letter without case, outside every CJK range.
_BATCH_SEPARATOR = "\u01c2\u01c2\u01c2"


def _analyze_batch(texts: list[str]) -> list[list[str]]:
    """``analyze`` of each text, in one pass over all of them (lowercasing, word splitting,
    stopwords and stemming each called once): the same terms, a fraction of the calls."""
    if len(texts) < 2 or any(_BATCH_SEPARATOR[0] in text for text in texts):
        return [analyze(text) for text in texts]
    text = f" {_BATCH_SEPARATOR} ".join(texts).lower()
    if not text.isascii():
        text = _CJK_RUN_RE.sub(_cjk_bigrams, text)
    words = [w for w in WORD_RE.findall(text) if w not in STOPWORDS]
    stems = _stemmer().stemWords(words) if words else []
    out: list[list[str]] = []
    start = 0
    for i, word in enumerate(words):
        if word == _BATCH_SEPARATOR:
            out.append(stems[start:i])
            start = i + 1
    out.append(stems[start:])
    return out


_lexicon = Lexicon()


def lexicon() -> Lexicon:
    """The shared lexicon (a fresh one once the last remembers ``Lexicon.LIMIT`` texts)."""
    global _lexicon
    if len(_lexicon.texts) >= Lexicon.LIMIT:
        _lexicon = Lexicon()
    return _lexicon


def vocabulary(texts: Sequence[str]) -> tuple[list[str], list[str]]:
    """The distinct words of ``texts`` that are one index term each (no stopwords, at
    least three letters), sorted, and that term for each: what query expansion can reach,
    and what a fold embeds next to the facts."""
    words = sorted(
        {
            w
            for text in texts
            for w in WORD_RE.findall(text.lower())
            if len(w) > 2 and w.isalpha() and w not in STOPWORDS
        }
    )
    pairs = [(w, t[0]) for w in words if len(t := analyze(w)) == 1]
    return [w for w, _ in pairs], [t for _, t in pairs]


def texts_to_embed(contents: Sequence[str]) -> list[str]:
    """What a fold embeds ahead of the turns: the facts, and their words for query
    expansion, so a turn embeds only what it asks."""
    return [*contents, *vocabulary(contents)[0]]


def entities(text: str) -> list[str]:
    """The analysed terms of ``text``'s capitalised words that do not open a sentence."""
    return analyze(" ".join(ENTITY_RE.findall(text)))


def without_entities(text: str, known: set[str]) -> str:
    """``text`` without its named entities (and their ``'s``) whose terms are in ``known``."""

    def drop(match: re.Match[str]) -> str:
        terms = analyze(match.group(0))
        return "" if terms and terms[0] in known else match.group(0)

    return _SPACES_RE.sub(" ", _POSSESSIVE_ENTITY_RE.sub(drop, text)).strip()
