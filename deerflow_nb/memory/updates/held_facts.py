"""The facts a change starts from, as the wipe guard looks at them: worked out only when
it asks (a teammate's batch of additions never does), from a copy of the list taken
before the rules change it in place."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from .updater import WIPE_MIN_FACTS, wipe_limit


class HeldFacts:
    """The facts memory held before one change: by id, and how many."""

    def __init__(self, facts: list[Any]) -> None:
        self._facts = list(facts)  # the list as it was; the rules may change the original

    @cached_property
    def by_id(self) -> dict[Any, dict[str, Any]]:
        """Each fact by its id."""
        return {f.get("id"): f for f in self._facts if isinstance(f, dict)}

    @cached_property
    def count(self) -> int:
        """How many facts memory held."""
        return sum(1 for f in self._facts if isinstance(f, dict))

    def wiped_by(self, lost: int) -> bool:
        """Whether losing ``lost`` of these facts is more than the wipe limit allows (they
        are counted only past the floor, which no count lowers)."""
        return lost > WIPE_MIN_FACTS and lost > wipe_limit(self.count)
