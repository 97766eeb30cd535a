"""Per-fact use and confirmation records (issue 20), in the journal's ``fact_usage`` table.

One row per fact id, upserted: when the fact was last injected into a turn (and how often),
last *used* (injected into a turn whose message shares a content word with it, or returned
by ``Memory.search``), and last *confirmed* (the user said it again, so a fold reinforced
it, or edited it by hand). memory.json is never rewritten for this: a turn costs one
logged row of its injected ids, plus an upsert for the few it used, in one short
transaction (``storage/usage.py`` writes the rows and counts the log in at each ledger
commit), and a failure to record is logged, never raised into the turn. The read side reads
the rows back (``readside/activity.py``) for staleness, eviction and the views.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...similarity import plain_words
from ...storage import usage as usage_rows
from ...storage.db import now_iso


def relevant_ids(facts: Iterable[Mapping[str, Any]], message: str) -> set[str]:
    """The facts ``message`` is about: those sharing with it a *distinctive* content word,
    one found in at most max(2, 10 %) of these facts ("polars", "Apollo12"; not
    "migration" when every project fact says it). Signatures are cached, so this is a few
    set operations per injected fact."""
    words = plain_words(message or "")
    if not words:
        return set()
    facts = list(facts)
    sigs = [plain_words(str(f.get("content", ""))) & words for f in facts]
    counts: dict[str, int] = {}
    for shared in sigs:
        for word in shared:
            counts[word] = counts.get(word, 0) + 1
    common = max(2, len(facts) // 10)
    distinctive = {word for word, n in counts.items() if n <= common}
    if not distinctive:  # every shared word is in many of these facts: none is about it
        return set()
    return {
        str(f.get("id"))
        for f, shared in zip(facts, sigs, strict=True)
        if not distinctive.isdisjoint(shared)
    }


def record_injected(
    db: Any, facts: Iterable[Mapping[str, Any]], message: str, when: str | None = None
) -> int:
    """One turn's injection: every fact injected, those relevant to ``message`` also used.
    Inside the caller's transaction: one logged row, and one ``executemany`` for the used."""
    facts = list(facts)
    if not facts:
        return 0
    stamp = when or now_iso()
    relevant = relevant_ids(facts, message)
    ids = list(dict.fromkeys(str(f.get("id")) for f in facts))
    usage_rows.log_injected(db, stamp, ids)
    if relevant:
        usage_rows.add_used(db, [(i, stamp) for i in ids if i in relevant])
    return len(ids)


def record_used(db: Any, fact_ids: Iterable[str], when: str | None = None) -> int:
    """Facts a search returned: used now."""
    stamp = when or now_iso()
    rows = [(str(i), stamp) for i in dict.fromkeys(fact_ids)]
    if rows:
        usage_rows.add_used(db, rows)
    return len(rows)


def record_confirmed(db: Any, fact_ids: Iterable[str], when: str | None = None) -> int:
    """Facts the user stated again (a fold's reinforce) or edited by hand: confirmed now."""
    stamp = when or now_iso()
    rows = [(str(i), stamp) for i in dict.fromkeys(fact_ids)]
    if rows:
        usage_rows.add_confirmed(db, rows)
    return len(rows)


def settle(db: Any) -> None:
    """Count the turns' logged injections in the use records (a ledger commit does)."""
    usage_rows.settle(db)


def inherit(db: Any, fact_id: str, sources: list[str]) -> None:
    """A merged fact starts with its sources' records: latest times, summed counts."""
    if sources:
        usage_rows.merge_into(db, fact_id, sources)
