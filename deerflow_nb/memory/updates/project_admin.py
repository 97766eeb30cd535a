"""Managing projects: listing them, their facts, renaming and forgetting one (``Memory.projects``).

Every change here is a change set through the gate (``gate.py``), recorded as a version like
any other: a rename and a forget can be rolled back, and a forget can wait for review.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...projects import DEFAULT_PROJECT, fact_project, project_name
from ...schema.changes import ChangeSet
from ...storage.journal import Journal
from ...storage.threads import rename_project
from ..scopes import Scope, project_names, project_summary
from .gate import Gate

if TYPE_CHECKING:
    from ..reader import MemoryReader

FORGET_TRIES = 3  # reads of a project's facts that another kernel may change before a forget


class Projects:
    """The projects of one home: what memory.json and the journal know of each."""

    def __init__(self, journal: Journal, gate: Gate, reader: MemoryReader) -> None:
        self.journal = journal
        self.gate = gate
        self._reader = reader  # memory.json as it is now (``MemoryReader.data``)

    def _data(self) -> dict[str, Any]:
        return self._reader.data

    def list(self) -> list[dict[str, Any]]:
        """Each project ``{name, facts, threads, last_used, summary}``, the latest used first;
        threads journaled before projects count as ``default``'s."""
        data = self._data()
        rows: dict[str, dict[str, Any]] = {}

        def row(name: str) -> dict[str, Any]:
            return rows.setdefault(
                name,
                {"name": name, "facts": 0, "threads": 0, "last_used": "", "summary": ""},
            )

        for name in project_names(data):
            row(name)["summary"] = project_summary(data, name)
        for fact in data.get("facts") or []:
            name = fact_project(fact) if isinstance(fact, dict) else None
            if name is not None:
                entry = row(name)
                entry["facts"] += 1
                stamp = str(fact.get("updatedAt") or fact.get("createdAt") or "")
                entry["last_used"] = max(entry["last_used"], stamp)
        for thread in self.journal.project_threads():
            entry = row(thread["project"] or DEFAULT_PROJECT)
            entry["threads"] += int(thread["threads"])
            entry["last_used"] = max(entry["last_used"], str(thread["last_used"] or ""))
        return sorted(rows.values(), key=lambda r: r["last_used"], reverse=True)

    def renamed(self, name: str) -> str:
        """What project ``name`` became through renames (``name`` itself if never renamed)."""
        return self.journal.renamed(name)

    def facts(self, name: str | None) -> list[dict[str, Any]]:
        """The facts of project ``name`` (None: the user's own)."""
        scope = Scope.own(name)
        return [f for f in self._data().get("facts") or [] if scope.sees(f)]

    def rename(self, old: str, new: str) -> int:
        """Rename project ``old`` to ``new``: its facts, its summary and its threads; how
        many facts moved. KeyError when ``old`` is unknown; ValueError when ``new`` is a
        project already (a rename would join two projects' facts, and hand one's thread
        names to the other's conversations: a shared one's members would get them all).
        Both are decided again under memory.json's lock, in the commit's transaction: a
        rename another kernel made meanwhile is seen, as if the two ran one after the other.
        """
        new = project_name(new)
        self._renamable(old, new)  # the quick answer, before any lock
        diff = {"renameProject": {"from": old, "to": new}}
        # Facts, summary, threads and the alias that keeps folder-found notebooks on the
        # project (``threads.rename_project``) commit in one transaction.
        change = ChangeSet(origin="user", reason="rename", source=old, diff=diff)
        with self.gate.committing(change) as committed:
            # memory.json is still the document the change was computed from (the new one
            # is renamed into place after this transaction), and the journal is read in it.
            moved = self._renamable(old, new)  # a refusal here rolls the rename back
            rename_project(committed.db, old, new)
        return moved

    def _renamable(self, old: str, new: str) -> int:
        """How many facts a rename of ``old`` to ``new`` moves; KeyError or ValueError (see
        ``rename``) when it may not happen."""
        known = {r["name"] for r in self.list()}
        if old not in known:
            raise KeyError(old)
        if new in known:
            raise ValueError(
                f"project {new} already exists; a rename would join it with {old}: rename "
                f"to a new name, or move facts one by one with %memory move ID --project {new}"
            )
        return len(self.facts(old))

    def forget(self, name: str, *, review: bool = False) -> dict[str, Any]:
        """Remove project ``name``'s facts and summary as one change (rolled back as one);
        with ``review`` it waits in ``pending()``. Threads stay in the journal.
        ``{"facts": [...], "pending_id"}``; KeyError when the project has nothing to forget.
        The facts removed are the ones the project holds as the change commits: when
        another kernel changed them after they were read, they are read again (ValueError,
        nothing forgotten, when that keeps happening)."""
        for _ in range(FORGET_TRIES):
            facts = self.facts(name)
            if not facts and not project_summary(self._data(), name):
                raise KeyError(name)
            ids = {f["id"] for f in facts}
            diff = {"factsToRemove": [f["id"] for f in facts], "forgetProjects": [name]}
            change = ChangeSet(
                origin="user", reason="forget", source=name, diff=diff, review=review
            )
            try:
                with self.gate.committing(change) as done:
                    # Under memory.json's lock (a proposal for review takes none): memory.json
                    # is the document the change was computed from; the project as read?
                    if not review and {f["id"] for f in self.facts(name)} != ids:
                        raise _Moved  # a fact added meanwhile: rolled back, read again
            except _Moved:
                continue
            except KeyError as exc:  # the gate's: a fact forgotten meanwhile
                if not exc.args or exc.args[0] not in ids:
                    raise
                continue
            return {"facts": facts, "pending_id": done.outcome.pending_id}
        raise ValueError(
            f"project {name}'s facts changed in another kernel each of the {FORGET_TRIES} "
            "times it was about to be forgotten; nothing was forgotten: forget it again"
        )


class _Moved(Exception):
    """Inside a forget's commit: the project's facts are not those the change removes."""
