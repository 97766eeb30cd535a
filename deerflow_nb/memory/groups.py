"""``Memory``'s facade by job (issue 38): ``memory.review``, ``memory.history`` and
``memory.threads``, and the two descriptors that build it, ``Group`` and ``Alias``.

A group is a small object with one job whose methods are its parts' own (a reader's bound
method, say) or do the work themselves: none only passes a call on. ``Alias`` keeps a name
DESIGN.md promises at ``Memory``'s top level (``mem.pending()``) as the group's method
(``mem.review.pending``), documented there once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from ..schema.changes import ChangeSet
from ..storage import ledger as ledger_rows
from ..storage import threads as thread_rows
from .scopes import project_names
from .updates.review import select

if TYPE_CHECKING:
    from ..storage.journal import Journal
    from .conversation import Conversation
    from .folding.fold import Folding
    from .folding.worker import FoldWorker
    from .reader import MemoryReader
    from .updates.gate import Gate
    from .updates.review import Review, ReviewItem

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
RECALL_K = 10  # messages a recall lists by default (%memory recall, the panel, the inspector)


class Group(Generic[T]):
    """A group of ``Memory``: read-only, held in the instance as ``_<name>``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Group[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Group[T] | T:
        if obj is None:
            return self
        value: T = getattr(obj, f"_{self.name}")
        return value

    def __set__(self, obj: object, value: object) -> None:
        raise AttributeError(
            f"memory.{self.name} is a group of methods, not a value"
            + (": set memory.review.enabled" if self.name == "review" else "")
        )


class Alias(Generic[P, R]):
    """A DESIGN.md name kept at ``Memory``'s top level: the bound method ``group.name``."""

    def __init__(self, group: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.group = group
        self.method = method.__name__
        self.__doc__ = method.__doc__

    @property
    def target(self) -> str:
        return f"{self.group}.{self.method}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Alias[P, R]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Callable[P, R]: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self.group), self.method)


class Reviewing:
    """``memory.review``: review mode's switch (``enabled``) and the proposals waiting for
    approval, decided whole or item by item."""

    def __init__(self, review: Review, reader: MemoryReader, gate: Gate) -> None:
        self._review = review
        self._gate = gate
        self._reader = reader
        # the reader's own: what waits, how many, and one change item by item
        self.pending, self.pending_count, self.items = (
            reader.pending, reader.pending_count, reader.review_items
        )  # fmt: skip

    @property
    def enabled(self) -> bool:
        """When true, folds become proposals in ``pending()`` that wait for approval."""
        return self._reader.review

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._review.on = value

    def __bool__(self) -> bool:
        raise TypeError("memory.review is a group: ask memory.review.enabled")

    def approve(self, ids: list[int] | str) -> int:
        """Apply proposals (oldest first) as the user's; how many (one another kernel decided
        meanwhile is skipped, not applied twice)."""
        return self._review.approve(select(self.pending(), ids), self._gate)

    def reject(self, ids: list[int] | str) -> int:
        """Drop proposals; returns how many (one another kernel decided meanwhile is not)."""
        return self._review.reject(select(self.pending(), ids))

    def approve_items(self, change_id: int, numbers: Iterable[int]) -> int:
        """Apply items ``numbers`` of a pending change, the rest waiting (same id, numbers)."""
        return self._review.decide_items(change_id, numbers, "approve", self._gate)

    def reject_items(self, change_id: int, numbers: Iterable[int]) -> int:
        """Drop only items ``numbers`` of a pending change (see ``approve_items``)."""
        return self._review.decide_items(change_id, numbers, "reject", self._gate)

    if TYPE_CHECKING:
        pending: Callable[[], list[dict[str, Any]]]
        pending_count: Callable[[], int]
        items: Callable[[dict[str, Any]], list[ReviewItem]]


class History:
    """``memory.history``: every recorded version and event, each fact's story (``of``,
    ``lineage``), what the folds did, and going back (``rollback``, ``recover``)."""

    def __init__(self, reader: MemoryReader, gate: Gate) -> None:
        self._reader = reader
        self._gate = gate
        # the reader's own methods, each documented there
        self.events, self.of, self.lineage, self.folds = (
            reader.events, reader.history, reader.lineage, reader.folds
        )  # fmt: skip
        self.versions, self.version, self.diff = reader.versions, reader.version, reader.diff

    def rollback(self, v: int) -> None:
        """Restore version ``v`` as a new change (history is kept, nothing is rewritten).

        ValueError when a project of ``v`` was renamed since and not back: its facts would
        come back under the old name while its threads, and the notebooks found from its
        folder, stay with the new one (renaming it back first makes the two agree). Decided
        again under memory.json's lock, in the commit's transaction: a rename another kernel
        made meanwhile is seen, as if the two ran one after the other."""
        document = self._reader.version(v)
        renamed_since(self._reader.db, v, document)  # the quick answer, before any lock
        change = ChangeSet(
            origin="user", reason="rollback", source=f"version {v}", document=document
        )
        with self._gate.committing(change) as committed:
            renamed_since(committed.db, v, document)  # a refusal here rolls the rollback back

    def recover(self) -> int:
        """Rebuild memory.json from the journal's last version (after corruption); its id.
        The last version is read under memory.json's lock, held until the rollback commits
        (every version is recorded under it): one another kernel records meanwhile is the
        one restored, not undone."""
        with self._gate.ledger.store.locked():
            newest = self._reader.newest()
            self.rollback(newest)
        return newest


def renamed_since(db: Any, v: int, document: dict[str, Any]) -> None:
    """ValueError (see ``History.rollback``) when a project of ``document``, version ``v``,
    was renamed since and not back, as the journal ``db`` says."""
    versions = ledger_rows.versions(db) if db is not None else []
    since = {r["source"] for r in versions if r["id"] > v and r["reason"] == "rename"}
    for old in sorted(project_names(document) & since):
        new = thread_rows.renamed(db, old)
        if new != old:
            raise ValueError(
                f"version {v} holds project {old}, renamed to {new} since: its threads "
                f"are in {new} now; rename it back first (%memory project {new} --rename "
                f"{old}), then roll back"
            )


class Threads:
    """``memory.threads``: conversations in (``add``), their folds queued or skipped, and
    the journal searched (``recall``)."""

    def __init__(
        self,
        journal: Journal,
        conversation: Conversation,
        folding: Folding,
        embedder: Callable[[], Any],
    ) -> None:
        self._journal = journal
        self._conversation = conversation
        self._folding = folding
        self._embedder = embedder
        self.worker: FoldWorker | None = None  # this home's fold worker, once ``start``ed
        self.skip = folding.skip

    def recall(
        self,
        query: str,
        k: int = RECALL_K,
        *,
        thread: str | None = None,
        project: str | None = None,
        everywhere: bool = False,
        relevant_only: bool = True,
    ) -> list[dict[str, Any]]:
        """Journal search over lead threads' user messages and final replies, best first,
        each ``{"thread", "seq", "role", "content", "created_at", "score", "project"}``,
        in ``project``'s threads unless ``everywhere`` (``retrieval/recall.py``, ``relevance``)."""
        from .retrieval.project_recall import recall_in
        from .scopes import asked

        scope = asked(project, everywhere)
        return recall_in(
            self._journal, query, k, thread, scope, self._embedder(), relevant_only=relevant_only
        )

    def enqueue(self, thread_id: str) -> bool:
        """Snapshot the journaled thread into ``memory_queue`` and restart the debounce;
        False (nothing queued) when memory is disabled, the thread is a sub-agent's, or it
        lacks a user message and a reply. Without ``start`` the row waits, durable."""
        due = self._folding.enqueue(thread_id)
        if due is not None and self.worker is not None:
            self.worker.notify(due)
        return due is not None

    def add(
        self, thread: str, messages: Iterable[dict[str, Any]], project: str | None = None
    ) -> str:
        """Journal ``messages`` in ``project``'s thread ``thread``, queue its fold; its id."""
        thread_id = self._conversation.add(thread, messages, project)
        self.enqueue(thread_id)
        return thread_id


class ReadOnlyMemory:
    """A home this kernel cannot write, in ``Memory``'s shape for the commands that only
    read (``%memory facts`` on a read-only mount): ``facts``, ``history`` and ``review``
    read through ``reader``; every other name is the reader's own."""

    def __init__(self, reader: MemoryReader) -> None:
        from .facts import FactReads

        self._reader = reader
        self.facts = FactReads(reader)
        self.history = History(reader, None)  # type: ignore[arg-type]  # reads only
        self.review = Reviewing(None, reader, None)  # type: ignore[arg-type]  # reads only

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)
