"""The change set: every change to memory, typed, naming who asked for it
(``memory/updates/gate.py``).

A fold's diff, the agent's ``remember``, a consolidation, a staleness proposal, a hand edit,
an import, a rollback: each becomes one ``ChangeSet`` and passes the one gate, which decides
by its ``origin`` what is checked, held for review, capped and counted by the wipe guard.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

# Who a change comes from. ``user``: a person, by hand (``%memory``, the panel, the
# inspector, an approval, an import). ``model``: the agent's ``remember`` in a turn.
# ``fold``: the memory model reading a conversation. ``maintenance``: consolidation and
# staleness upkeep. ``team``: a teammate's change to a shared project, pulled from the
# team's PostgreSQL (``memory/sharing.py``).
Origin = Literal["user", "model", "fold", "maintenance", "team"]
ORIGINS: tuple[str, ...] = ("user", "model", "fold", "maintenance", "team")


class FactEdit(BaseModel):
    """A hand edit of one fact: what changes (None keeps it)."""

    model_config = ConfigDict(defer_build=True)

    fact_id: str
    content: str | None = None
    category: str | None = None
    confidence: float | None = Field(None, ge=0, le=1)
    # A move between scopes: "user" (shared by every project) or "project" (``project``).
    scope: Literal["user", "project"] | None = None
    project: str | None = None


class ChangeSet(BaseModel):
    """One change to memory, before the gate.

    Exactly one of ``diff`` (DeerFlow's diff, plus ``merges`` and ``stale``), ``edit`` or
    ``document`` (the whole memory, for an import, a reset or a rollback) says what changes.
    ``reason`` names the kind (``fold``, ``remember``, ``add``, ``edit``, ``forget``,
    ``consolidate``, ``stale``, ``approve``, ``rollback``, ``import``, ``reset``), ``source``
    where it came from (a thread, a path, ``manual``) and ``turn`` the agent turn of a
    ``remember``.
    """

    model_config = ConfigDict(defer_build=True)

    origin: Origin
    reason: str
    source: str = "manual"
    diff: dict[str, Any] | None = None
    edit: FactEdit | None = None
    document: dict[str, Any] | None = None
    turn: str | None = None
    threshold: float | None = None  # None: memory.fact_confidence_threshold
    pending_id: int | None = None  # the pending change an approval applies
    # The active project: where facts labelled ``scope: "project"`` go (``memory/scopes.py``).
    project: str | None = None
    review: bool = False  # wait for approval whatever the review mode (forgetting a project)

    def model_post_init(self, _: Any) -> None:
        given = [x for x in (self.diff, self.edit, self.document) if x is not None]
        if len(given) != 1:
            raise ValueError("a change set holds exactly one of diff, edit or document")


class ChangeDoor(Protocol):
    """The gate as the parts that hand it changes see it (``memory.updates.gate.Gate``): they take
    this, not the gate's module, so no module of memory/ imports back the one that uses it."""

    def submit(self, change: ChangeSet, finish: Any = None) -> Any: ...
