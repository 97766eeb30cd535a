"""What the user said ranks first: echoes of a statement collapse into the statement.

In a notebook the user states a fact once ("Remember that I use 5-fold cross-validation"),
the assistant says it back ("Got it: you use 5-fold cross-validation…"), and later the
user asks about it ("Which cross-validation do I use?") and is answered with it again.
All of them match a search for it; only the first is evidence. Here:

- an echo is a later assistant message, or a later user question, whose terms are mostly
  (``ECHO_SHARE``, at least ``ECHO_MIN`` terms) the terms of an earlier user statement
  among the best results; a statement's echoes collapse into one result, the statement,
  at the best score among them, naming them in ``echoes``. A question is not evidence for
  itself: asked after the statement, it is one of its echoes.
- an assistant message is read part by part too (what its colons introduce, its
  semicolons separate, its lines hold): a reply framed by words of its own ("(offline
  model) From memory: Prefers polars over pandas.") or quoting several facts at once
  ("From memory: Prefers polars; Uses DuckDB") echoes each statement one of its parts is
  nearly all made of (``PART_SHARE``), and collapses into the one it echoes best.
- a user question answered by an echo of a statement (the next message of its thread)
  asked about that statement: it collapses into it too, even when it shares few of its
  words ("What operating system is on my laptop?").

Demoting every stored question as well was measured and dropped: on LOCOMO, where
speakers' questions sit beside the answers, it cost 0.03 of recall@10. The readings by
part and the answered questions leave LOCOMO's recall@10 as it was
(0.725, halves 0.737 / 0.720); a transcript's "Speaker:" opening is not a part, and a
reply is not read sentence by sentence (that folded real answers: 0.658).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .terms import lexicon

# An echo shares at least this share of its own terms, and this many, with the statement.
ECHO_SHARE = 0.6
ECHO_MIN = 2
# A part of a reply ("From memory: Prefers polars over pandas") echoes a statement when
# nearly all its terms are the statement's: a quoted fact is; the assistant's own words
# after "Noted:" ("I would fill the March gaps per store") are not.
PART_SHARE = 0.75
# How many of the best results are compared, per result asked for (and at least POOL_MIN).
POOL_PER_RESULT = 3
POOL_MIN = 30
# An assistant message's parts: what a colon introduces, a semicolon separates, a line
# holds ("From memory: A; B", a list of recalled messages). Not its sentences: on LOCOMO,
# reading each sentence of a reply on its own folded real answers into earlier statements
# (recall@10 0.725 -> 0.658).
_PARTS = re.compile(r"[:;]\s+|\n+")
# A transcript's speaker ("Melanie: …", as ``recall`` reads it) is no frame: left as is.
_SPEAKER = re.compile(r"\s*[A-Z][\w'-]*(?: [A-Z][\w'-]*)?:\s")


def is_question(row: dict[str, Any]) -> bool:
    """A user message that asks rather than states."""
    return row["role"] == "user" and str(row["content"]).rstrip().endswith("?")


def collapse(
    ranked: list[int],
    total: dict[int, float],
    meta: dict[int, dict[str, Any]],
    k: int,
    key: Callable[[int], tuple[float, int]],
) -> tuple[list[int], dict[int, list[int]]]:
    """``ranked`` with each statement's echoes folded into it (the statement takes their
    best score, in ``total``), re-ranked by ``key``; and each statement's echoes."""
    pool = ranked[: max(POOL_PER_RESULT * k, POOL_MIN)]
    analysed = lexicon().analyze_many([str(meta[i]["content"]) for i in pool])[0]
    terms = {i: set(found) for i, found in zip(pool, analysed, strict=True)}
    statements = [i for i in pool if meta[i]["role"] == "user" and not is_question(meta[i])]
    echoes: dict[int, list[int]] = {}
    folded: set[int] = set()
    for i in pool:
        if meta[i]["role"] == "user" and not is_question(meta[i]):
            continue
        best, best_share = None, 0.0
        for n, own in enumerate(_readings(meta[i], terms[i])):
            needed = ECHO_SHARE if n == 0 else PART_SHARE  # the whole message, then parts
            for s in statements:
                if s >= i:  # only what was said before
                    continue
                shared = len(own & terms[s])
                share = shared / len(own) if own else 0.0
                if shared >= ECHO_MIN and share >= needed and share > best_share:
                    best, best_share = s, share
        if best is not None:
            echoes.setdefault(best, []).append(i)
            total[best] = max(total[best], total[i])
            folded.add(i)
    # A question answered by an echo of a statement asked about that statement.
    echo_of = {e: s for s, found in echoes.items() for e in found}
    place = {(meta[i]["thread"], meta[i]["pos"]): i for i in pool}
    for i in pool:
        if i in folded or not is_question(meta[i]):
            continue
        answer = place.get((meta[i]["thread"], meta[i]["pos"] + 1))
        statement = echo_of.get(answer) if answer is not None else None
        if statement is not None and statement < i and meta[answer]["role"] == "assistant":
            echoes[statement].append(i)
            total[statement] = max(total[statement], total[i])
            folded.add(i)
    if not folded:
        return ranked, {}
    kept = [i for i in ranked if i not in folded]
    return sorted(kept, key=key), echoes


def _readings(row: dict[str, Any], whole: set[str]) -> list[set[str]]:
    """The term sets a message is compared by: the whole message first, then, for an
    assistant's, each of its parts holding at least ``ECHO_MIN`` terms."""
    if row["role"] != "assistant":
        return [whole]
    text = str(row["content"])
    speaker = _SPEAKER.match(text)
    parts = [p for p in _PARTS.split(text[speaker.end() if speaker else 0 :]) if p.strip()]
    if len(parts) < 2:
        return [whole]
    analysed = lexicon().analyze_many(parts)[0]
    return [whole, *(set(t) for t in analysed if len(set(t)) >= ECHO_MIN)]
