"""How active each fact is: its use records read back (``fact_usage``), when it was last
confirmed and used, the keep score that blends them with its confidence, and the eviction
order that score gives (``memory.eviction``).

Pure functions over the memory document and the use records, but ``read``; the write side
(``updates/aging.py``: staleness, consolidation; ``updates/updater.py``: eviction) and the
reader's ``eviction_order`` both take them from here. See ``updates/aging.py`` for the blend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...storage import usage as usage_rows


def read(db: Any, fact_ids: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """``fact_id -> row`` of the use records for the given facts (all rows when None)."""
    if fact_ids is None:
        return usage_rows.rows(db)
    return usage_rows.rows(db, list(dict.fromkeys(map(str, fact_ids))))


DAY = 86_400.0
WEIGHT_CONFIDENCE, WEIGHT_CONFIRMED, WEIGHT_USE = 0.65, 0.25, 0.10
CONFIRM_HALF_LIFE_DAYS = 90.0
USE_HALF_LIFE_DAYS = 30.0
USE_SATURATION = 8  # this many uses count as full heat
TOPICAL_FACTOR = 1 / 3
AGE_FACTOR = {"correction": 2.0, "goal": TOPICAL_FACTOR}
# "Is preparing the Q3 churn report", "Wants to learn Rust": true for a season.
_TOPICAL = re.compile(
    r"^(?:is|are)\s+(?:currently\s+)?(?:preparing|working on|building|writing|drafting|"
    r"analy[sz]ing|planning|finishing|migrating|organi[sz]ing|running|trying|studying|"
    r"learning|reviewing|exploring|getting ready)\b|"
    r"^(?:wants|plans|needs|hopes|aims|intends|is going) to\b|^might\b",
    re.IGNORECASE,
)
POLICIES = ("blend", "confidence")


def parse_time(stamp: Any) -> datetime | None:
    """An ISO timestamp (``2026-01-31T12:00:00.000Z``, a bare date too) as aware UTC."""
    if not stamp:
        return None
    text = str(stamp).strip().replace("Z", "+00:00")
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        try:
            value = datetime.fromisoformat(text[:10])
        except ValueError:
            return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def as_time(now: datetime | str | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if isinstance(now, datetime):
        return now if now.tzinfo else now.replace(tzinfo=UTC)
    parsed = parse_time(now)
    if parsed is None:
        raise ValueError(f"not a date or time: {now!r}")
    return parsed


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_topical(fact: Mapping[str, Any]) -> bool:
    """A goal or a current activity: what DeerFlow's topOfMind holds, true for a season."""
    return fact.get("category") == "goal" or bool(_TOPICAL.match(str(fact.get("content", ""))))


def age_factor(fact: Mapping[str, Any]) -> float:
    if is_topical(fact):
        return TOPICAL_FACTOR
    return AGE_FACTOR.get(str(fact.get("category")), 1.0)


def latest(*stamps: Any) -> datetime | None:
    times = [t for t in map(parse_time, stamps) if t is not None]
    return max(times) if times else None


def last_confirmed(fact: Mapping[str, Any], use: Mapping[str, Any] | None) -> datetime | None:
    use = use or {}
    return latest(fact.get("createdAt"), fact.get("updatedAt"), use.get("last_confirmed"))


def last_active(fact: Mapping[str, Any], use: Mapping[str, Any] | None) -> datetime | None:
    """The later of its last confirmation and its last use (a plain injection is no use)."""
    return latest(last_confirmed(fact, use), (use or {}).get("last_used"))


def days_since(since: datetime | None, now: datetime) -> float | None:
    return None if since is None else max(0.0, (now - since).total_seconds() / DAY)


@dataclass(frozen=True)
class KeepScore:
    """How much a fact deserves its place (higher stays), and its parts, in words."""

    score: float
    confidence: float
    confirmed_days: float | None
    used_days: float | None
    uses: int
    protected: bool

    def reason(self, policy: str) -> str:
        if policy == "confidence":
            return f"least confident ({self.confidence:.2f}; memory.eviction: confidence)"
        confirmed = (
            "never confirmed"
            if self.confirmed_days is None
            else f"last confirmed {self.confirmed_days:.0f} d ago"
        )
        used = (
            "never used"
            if self.used_days is None
            else f"last used {self.used_days:.0f} d ago ({self.uses}×)"
        )
        return (
            f"lowest keep score {self.score:.3f}: confidence {self.confidence:.2f}, "
            f"{confirmed}, {used}"
        )


def keep_score(fact: Mapping[str, Any], use: Mapping[str, Any] | None, now: datetime) -> KeepScore:
    """The blend: 0.65 confidence + 0.25 confirmation freshness + 0.10 use heat."""
    use = use or {}
    confidence = unit(fact.get("confidence"))
    confirmed = days_since(last_confirmed(fact, use), now)
    fresh = (
        0.0
        if confirmed is None
        else 0.5 ** (confirmed / (CONFIRM_HALF_LIFE_DAYS * age_factor(fact)))
    )
    used = days_since(parse_time(use.get("last_used")), now)
    uses = int(use.get("used") or 0)
    heat = 0.0
    if used is not None and uses > 0:
        heat = 0.5 ** (used / USE_HALF_LIFE_DAYS) * min(
            1.0, math.log2(1 + uses) / math.log2(1 + USE_SATURATION)
        )
    score = WEIGHT_CONFIDENCE * confidence + WEIGHT_CONFIRMED * fresh + WEIGHT_USE * heat
    return KeepScore(
        round(score, 4), confidence, confirmed, used, uses, fact.get("category") == "correction"
    )


def unit(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return min(1.0, max(0.0, number)) if math.isfinite(number) else 0.0


@dataclass(frozen=True)
class Eviction:
    index: int
    score: float
    reason: str


def eviction_order(
    facts: list[dict[str, Any]],
    usage: Mapping[str, Mapping[str, Any]],
    *,
    policy: str = "blend",
    now: datetime | str | None = None,
) -> list[Eviction]:
    """Every fact, the first to evict first, with its score and the reason it would go."""
    moment = as_time(now)
    if policy == "confidence":
        order = sorted(
            range(len(facts)),
            key=lambda i: (
                unit(facts[i].get("confidence")),
                str(facts[i].get("createdAt", "")),
                i,
            ),
        )
        return [
            Eviction(
                i,
                unit(facts[i].get("confidence")),
                keep_score(facts[i], None, moment).reason("confidence"),
            )
            for i in order
        ]
    scores = [keep_score(f, usage.get(str(f.get("id"))), moment) for f in facts]
    order = sorted(
        range(len(facts)),
        key=lambda i: (scores[i].protected, scores[i].score, str(facts[i].get("createdAt", "")), i),
    )
    out = []
    for i in order:
        reason = scores[i].reason("blend")
        if scores[i].protected:
            reason += " (a correction: evicted only when nothing else is left)"
        out.append(Eviction(i, scores[i].score, reason))
    return out


def eviction_rows(
    facts: list[dict[str, Any]], usage: Mapping[str, Mapping[str, Any]], policy: str
) -> list[dict[str, Any]]:
    """``eviction_order`` as rows ``{"id", "content", "score", "reason"}``, the first to go
    first; ValueError for a policy that is neither "blend" nor "confidence"."""
    if policy not in POLICIES:
        raise ValueError(f"unknown eviction policy {policy!r}: use 'blend' or 'confidence'")
    return [
        {
            "id": facts[e.index].get("id"),
            "content": facts[e.index].get("content"),
            "score": round(e.score, 4),
            "reason": e.reason,
        }
        for e in eviction_order(facts, usage, policy=policy)
    ]
