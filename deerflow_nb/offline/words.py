"""The offline model's words: stopwords, crude stems, content words, hashed embeddings.

The hashed bag-of-words embedding is what the model and the loopback server return.
"""

from __future__ import annotations

import hashlib
import math
import re
from functools import lru_cache
from typing import Any

from ..similarity import STOPWORDS as SHARED_STOPWORDS

EMBEDDING_DIM = 256
# Beyond the function words every reader drops (``similarity.STOPWORDS``): the words of a
# request to a model ("use", "show", "need") and those too common to tie a question to a
# remembered fact ("every", "always", "thanks"): sharing one of them is not relevance.
_GENERIC_TEXT = """
    use using used make one two show give need lets
    every always never often usually sometimes much many lot lots still even quite rather
    maybe perhaps everything nothing anyone everyone way sort
    stuff etc via across okay ok thanks thank hi hello hey sure well yeah
"""
STOPWORDS = SHARED_STOPWORDS | frozenset(_GENERIC_TEXT.split())
# A word or an identifier (``df_sales``): the model reads requests about code, so an
# underscore joins, unlike in memory's index terms (``memory/terms.WORD_RE``).
WORD_RE = re.compile(r"[A-Za-z0-9_]+")
_SENTENCE_RE = re.compile(r"(.+?[.!?])(?:\s|$)", re.DOTALL)
# A question: it ends in "?", or opens with a question word ("what metric did we…"), or
# with an auxiliary before its subject ("do I use…", "is the deadline…", "can you…").
_AUXILIARIES = (
    r"do|does|did|is|are|was|were|am|can|could|would|will|should|shall|may|might|must|"
    r"have|has|had|isn't|aren't|wasn't|weren't|don't|doesn't|didn't|can't|won't|shouldn't"
)
_QUESTION_OPENING = re.compile(
    r"^(?:(?:so|and|but|also|ok(?:ay)?|hey|then|now|remind me|tell me|wait)[,\s]+)*"
    r"(?:(?:what|which|who|whom|whose|when|where|why|how)(?:'s|'re|'d)?\b|"
    rf"(?:{_AUXILIARIES})\s+(?:i|we|you|they|he|she|it|there|this|that|these|those|the|a|an|"
    r"my|our|your|their|its|any|anyone|someone|people)\b)",
    re.IGNORECASE,
)


def message_text(message: Any) -> str:
    """The text of a message whatever shape its content has (str, content parts, None)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _stem(word: str) -> str:
    """A crude suffix strip so 'prefers'/'prefer' and 'dataframes'/'dataframe' match."""
    word = word.lower()
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> list[str]:
    """Stemmed words of ``text`` without stopwords, in order, without repeats."""
    return list(_content_words(text))


@lru_cache(maxsize=16384)
def _content_words(text: str) -> tuple[str, ...]:
    """``content_words``, kept per text: a turn quotes from every injected fact, and most
    facts are the ones the last turn read."""
    seen: dict[str, None] = {}
    for word in WORD_RE.findall(text):
        if word.lower() in STOPWORDS or len(word) < 2:
            continue
        seen.setdefault(_stem(word), None)
    return tuple(seen)


def hashed_embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """A deterministic L2-normalised hashed bag of words: shared words give high cosine."""
    vector = [0.0] * dim
    for word in WORD_RE.findall(text.lower()):
        digest = hashlib.blake2b(_stem(word).encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        vector[value % dim] += 1.0 if (value >> 63) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


def key_terms(text: str, limit: int = 6) -> list[str]:
    """Content words in their original spelling, first occurrences, at most ``limit``."""
    terms: dict[str, str] = {}
    for word in WORD_RE.findall(text):
        if word.lower() in STOPWORDS or len(word) < 3:
            continue
        terms.setdefault(_stem(word), word)
    return list(terms.values())[:limit]


def is_question(sentence: str) -> bool:
    """Whether ``sentence`` asks rather than states: it ends in "?", or opens as a question
    does ("What metric did we decide on", "Do I use pandas", "Is the deadline Friday")."""
    text = " ".join(sentence.replace("\u2019", "'").split())
    return text.endswith("?") or bool(_QUESTION_OPENING.match(text))


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` on one line (all of it when there is no end mark)."""
    text = " ".join(text.split())
    match = _SENTENCE_RE.match(text)
    return match.group(1) if match else text
