"""memory.json's summaries composed from facts: which user section a fact's category feeds,
and the one way a summary is written from facts (each fact one sentence, joined by spaces).

The offline model composes the user sections and a project's summary this way
(``offline/extractor.py``), and memory recomposes such a summary the same way whenever a
fact it summarises is forgotten, moved or corrected (``memory/updates/summaries.py``), so
what the user took back is never injected through a summary. A composed summary covers
every fact it summarises; only past ``MAX_SUMMARY_CHARS`` (about 1,000 tokens, far more
than the injection gives summaries: half of ``memory.max_injection_tokens``, where
``block.fit_summaries`` shortens them) are sentences dropped, the least confident first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

MAX_SUMMARY_CHARS = 4000  # a section's summary is cut to this many characters when stored

# The user section each fact category is summarised in (DeerFlow's three user sections).
SECTION_OF = {
    "context": "workContext",
    "knowledge": "workContext",
    "preference": "personalContext",
    "behavior": "personalContext",
    "goal": "topOfMind",
    "correction": "topOfMind",
}
_WORD = re.compile(r"[^\W_]+")


def section_of(category: object) -> str:
    """The user section a fact of ``category`` is summarised in (``workContext`` when the
    category is none of DeerFlow's)."""
    return SECTION_OF.get(category, "workContext") if isinstance(category, str) else "workContext"


def as_sentence(text: str) -> str:
    """``text`` on one line, ending with a full stop unless it ends a sentence already."""
    text = " ".join(text.split())
    return text if not text or text[-1] in ".!?" else text + "."


def compose(texts: Sequence[str], ranks: Sequence[float] | None = None) -> str:
    """The summary of ``texts`` (facts' contents, in order): one sentence each, repeats
    once, joined with spaces. Past ``MAX_SUMMARY_CHARS`` the sentences of the lowest
    ``ranks`` (a fact's confidence; among equals the later one) are dropped whole, so no
    sentence is cut and no fact drops out for being old."""
    seen: dict[str, float] = {}
    for i, text in enumerate(texts):
        sentence = as_sentence(text)
        if sentence:
            rank = ranks[i] if ranks is not None else 0.0
            seen[sentence] = max(seen.get(sentence, rank), rank)
    sentences = list(seen)
    size = sum(len(s) + 1 for s in sentences) - 1
    if size > MAX_SUMMARY_CHARS:
        order = sorted(range(len(sentences)), key=lambda i: (seen[sentences[i]], -i))
        dropped: set[int] = set()
        for i in order:
            if size <= MAX_SUMMARY_CHARS:
                break
            dropped.add(i)
            size -= len(sentences[i]) + 1
        sentences = [s for i, s in enumerate(sentences) if i not in dropped]
    return " ".join(sentences)


@lru_cache(maxsize=65536)
def words(text: str) -> frozenset[str]:
    """The case-folded words of ``text`` (punctuation ignored). Cached: each change checks
    the summaries against every stored fact's words."""
    return frozenset(_WORD.findall(text.casefold()))
