"""Near-duplicate detection for facts, without a model; and the words no text is about.

``STOPWORDS`` (English function words and the chat words that carry no topic) is defined
here, the lowest layer, once: memory's index terms and recall's query words
(``memory/retrieval/terms.py``) and the offline model's reading (``offline/words.py``) drop them.

A fact is reduced to its *signature*: the set of content words, lower-cased, lightly
stemmed, with ``SIGNATURE_STOPWORDS`` ("the", "user", "really", "using", "instead")
dropped and synonyms of the common verbs folded together. Words that follow a comparison
("over", "instead of", "rather than") are marked as the rejected side, so "prefers polars
over pandas" and "prefers pandas over polars" differ. Two facts are near-duplicates when
their signatures are equal: every content word on one side has its match on the other,
so facts that share a template but differ in one name ("Works on project Apollo" /
"... Zephyr") stay distinct. Equality also makes lookups a dict hit, so a fold stays
fast on large stores.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

_WORD = re.compile(r"[a-z0-9][a-z0-9+#']*(?:[._-][a-z0-9+#]+)*")
_COMPARE = re.compile(r"\b(?:over|instead of|rather than|than|versus|vs\.?)\b")
_CLAUSE_END = re.compile(r"[,;:!?()]|\band\b|\bbut\b|\.(?:\s|$)")


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


# English function words plus the question and chat words that carry no topic: what a
# search's terms and a model's reading of a request leave out.
STOPWORDS = _wordset(
    """
    a about above after again against all also am an and any are aren as at be because been
    before being below between both but by can cannot could couldn did didn do does doesn doing
    don down during each else ever few for from further get gets got had hadn has hasn have
    haven having he her here hers herself him himself his how i if in into is isn it its itself
    just kind let like ll me more most much must my myself no nor not now of off on once only
    or other ought our ours ourselves out over own per please re really same shan she should
    shouldn so some such than that the their theirs them themselves then there these they
    thing things this those through to too under until up upon us very ve was wasn we were
    weren what whatever when whenever where whether which while who whom whose why will with
    within without won would wouldn yes yet you your yours yourself yourselves
    tell know think say said want wants anything something someone
    """
)
# What a signature drops: a different list, as a signature must keep the words that change
# a fact's meaning and a search may drop ("off", "not", "before", "more", "against"), and
# drops the filler of extracted facts a search keeps ("user", "using", "instead").
SIGNATURE_STOPWORDS = _wordset(
    """
    a an the and or but if of to in on at by for with from as into onto about than then
    is are was were be been being am do does did done has have had having this that these
    those it its it's they them their theirs he him his she her hers we us our you your
    i me my mine he's she's they're i'm i've i'd i'll there here which who whom whose what
    when where why how all any each both some such so very too also just only own same
    can could would should will shall may might must s t
    user user's users person someone really quite actually generally basically mostly
    usually typically often always currently now use uses used using utilize utilizes
    utilizing instead
    """
)
# Verbs of preference collapse to one token, so "likes X" and "prefers X" agree.
_PREFERENCE = _wordset(
    "prefer prefers preferred preferring like likes liked liking love loves loved loving "
    "enjoy enjoys enjoyed favor favors favour favours"
)
_NEGATIONS = _wordset("no not never longer don't doesn't didn't stopped stop stops")


@lru_cache(maxsize=65_536)
def normalize_text(text: str) -> str:
    """Exact-duplicate key: case-folded, whitespace collapsed, trailing punctuation dropped.
    Cached: a fold keys every stored fact by it, and stored texts rarely change."""
    return " ".join(text.casefold().split()).rstrip(" .!;")


def stem(word: str) -> str:
    """A light suffix stemmer: enough to match plurals and verb forms of the same word."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: len(word) - len(suffix)] + repl
            if suffix in ("ing", "ed") and len(base) > 3 and base[-1] == base[-2]:
                base = base[:-1]
            return base
    return word


def _words(text: str) -> Iterable[str]:
    for word in _WORD.findall(text):
        if word in _PREFERENCE:
            yield "prefer"
        elif word in _NEGATIONS:
            yield "not"
        elif word not in SIGNATURE_STOPWORDS:
            yield stem(word)


@lru_cache(maxsize=65536)
def signature(text: str) -> frozenset[str]:
    """The content words of ``text``; words on the rejected side of a comparison get a ``~``.

    Cached: a fold compares against every stored fact, and stored facts rarely change.
    """
    lowered = text.casefold().replace("’", "'")
    match = _COMPARE.search(lowered)
    if match is None:
        return frozenset(_words(lowered))
    head, tail = lowered[: match.start()], lowered[match.end() :]
    end = _CLAUSE_END.search(tail)
    rejected, rest = (tail[: end.start()], tail[end.start() :]) if end else (tail, "")
    return frozenset([*_words(head), *(f"~{w}" for w in _words(rejected)), *_words(rest)])


@lru_cache(maxsize=65536)
def plain_words(text: str) -> frozenset[str]:
    """``text``'s content words, either side of a comparison (``signature`` without its
    ``~`` marks). Cached: a fact's text is matched on every turn that injects it."""
    return frozenset(w.lstrip("~") for w in signature(text))


def overlap(query: str, text: str) -> float:
    """Share of the query's content words found in ``text`` (0 when the query has none).

    Words on the rejected side of ``text`` ("over pandas") do not count: "forget that I use
    pandas" is not about "Prefers polars over pandas".
    """
    q = plain_words(query)
    if not q:
        return 0.0
    return len(q & signature(text)) / len(q)
