"""Which stored fact a new statement repeats, so a fold reinforces it instead of adding it.

A statement repeats a fact of its own scope (the user's, or one project's) when, in this
order: its text is the fact's (case and spacing aside; the latest such fact); its content
words are the fact's (the first); or it restates the fact with a detail or two more — all of
the fact's words and at most ``MAX_EXTRA_WORDS`` more (the first; see below).

The stored facts are read once for the statements a change brings, whose keys are known
before the pass: a fact whose keys no statement wants costs two set lookups, not three
index entries, so a fold of a few statements in a large memory indexes nothing it will not
ask for.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from ...projects import fact_project
from ...similarity import normalize_text, signature

Fact = dict[str, Any]
Owner = str | None  # a project's name; None: the user's
Keys = tuple[Owner, str, frozenset[str]]  # a statement's owner, text key and words

# A new fact restates a stored one when it says all of it and adds at most this many words
# ("Prefers polars over pandas for data frames" / "Prefers polars over pandas"); the stored
# fact must have at least MIN_RESTATED words, so "Uses Python" / "Uses Python and R" differ.
MAX_EXTRA_WORDS = 2
MIN_RESTATED = 3


@lru_cache(maxsize=65_536)
def dedupe_keys(content: str) -> tuple[str, frozenset[str]]:
    """A text's exact-duplicate key and its words, in one cached lookup: a fold keys every
    stored fact by both, and stored texts rarely change."""
    return normalize_text(content), signature(content)


class Repeats:
    """The stored facts that ``wanted``'s statements repeat, found in one pass over
    ``facts``; ``add`` then makes each fact the change adds one a later statement may
    repeat, as a stored one."""

    def __init__(self, facts: Iterable[Fact], wanted: Iterable[Keys]) -> None:
        texts: dict[Owner, set[str]] = {}
        sigs: dict[Owner, set[frozenset[str]]] = {}
        longer: dict[Owner, list[frozenset[str]]] = {}  # words a stored fact may restate
        sizes: dict[Owner, set[int]] = {}  # how many words such a stored fact has
        for owner, text, sig in wanted:
            texts.setdefault(owner, set()).add(text)
            if sig:
                sigs.setdefault(owner, set()).add(sig)
            if len(sig) > MIN_RESTATED:
                longer.setdefault(owner, []).append(sig)
                extra = range(1, MAX_EXTRA_WORDS + 1)
                sizes.setdefault(owner, set()).update(len(sig) - n for n in extra)
        self._text: dict[tuple[Owner, str], Fact] = {}
        self._sig: dict[tuple[Owner, frozenset[str]], Fact] = {}
        self._restated: dict[tuple[Owner, frozenset[str]], Fact] = {}
        self._added: dict[Owner, list[tuple[frozenset[str], Fact]]] = {}
        for fact in facts:
            owner = fact_project(fact) if "scope" in fact else None  # most are the user's
            wanted_texts = texts.get(owner)
            if wanted_texts is None:  # no statement of this scope
                continue
            text, sig = dedupe_keys(fact["content"])
            if text in wanted_texts:
                self._text[owner, text] = fact
            if not sig:
                continue
            if sig in sigs.get(owner, ()):
                self._sig.setdefault((owner, sig), fact)
            if len(sig) >= MIN_RESTATED and len(sig) in sizes.get(owner, ()):
                for more in longer[owner]:
                    if _restates(more, sig) and (owner, more) not in self._restated:
                        self._restated[owner, more] = fact

    def match(self, owner: Owner, text: str, sig: frozenset[str]) -> Fact | None:
        """The fact the statement ``(owner, text, sig)`` repeats, if any."""
        found = self._text.get((owner, text)) or self._sig.get((owner, sig))
        if found is not None or len(sig) < MIN_RESTATED:
            return found
        added = self._added.get(owner, [])
        return self._restated.get((owner, sig)) or next(
            (fact for stored, fact in added if _restates(sig, stored)), None
        )

    def add(self, owner: Owner, text: str, sig: frozenset[str], fact: Fact) -> None:
        """``fact``, which the change adds, is one a later statement may repeat."""
        self._text[owner, text] = fact
        if sig:
            self._sig.setdefault((owner, sig), fact)
        if len(sig) >= MIN_RESTATED:
            self._added.setdefault(owner, []).append((sig, fact))


def _restates(sig: frozenset[str], stored: frozenset[str]) -> bool:
    """Whether words ``sig`` say all of ``stored`` and at most ``MAX_EXTRA_WORDS`` more."""
    return stored < sig and len(sig) - len(stored) <= MAX_EXTRA_WORDS
