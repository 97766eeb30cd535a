"""Memory changes in sight: the cell whose turn a fold learned from says what it did.

A ``%%agent`` turn is folded into memory after the debounce, in the background worker,
usually when the cell has long finished. So the cell's turn view stays open to one more
line, and ``FoldNotices`` adds it when the fold of its thread lands (the view redraws its
display in place, by its id): ``Memory updated: remembered “…”; forgot “…”``, or what
waits for review. A fold that keeps nothing adds no line. Terminal IPython cannot redraw
what it printed, so there the line is printed before the next ``%%agent`` turn instead.

The notices listen to ``Memory.on_change`` and read the fold's record (``Memory.history.folds``):
they see what every other view sees, and write nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..memory import Memory

log = logging.getLogger(__name__)
RECENT_FOLDS = 20  # how many of the newest folds are searched for a watched thread's
_VERBS = {"add": "remember", "remove": "forget", "merge": "merge into"}  # held items


def fold_note(
    fold: Mapping[str, Any], texts: Mapping[str, str], held: Sequence[str] = ()
) -> str | None:
    """A fold's record in one line for the cell, or None when it kept nothing worth a
    word (no fact added, removed or evicted, nothing held). ``texts`` maps fact ids to
    their text; ``held`` says what waits for review (``forget “…”``)."""

    def quoted(ids: Any) -> str:
        return ", ".join(f"“{texts.get(str(i), str(i))}”" for i in ids or [])

    parts = []
    if fold.get("added"):
        parts.append(f"remembered {quoted(fold['added'])}")
    if fold.get("removed"):
        parts.append(f"forgot {quoted(fold['removed'])}")
    if fold.get("evicted"):
        parts.append(f"let go of {quoted(fold['evicted'])} to stay within memory.max_facts")
    change = fold.get("pending_id")
    if change is not None and fold.get("held"):
        what = f": {'; '.join(held)}" if held else ""
        waits = f"waiting for your review as change #{change}{what} (%memory pending)"
        if not parts:
            return f"Memory: {waits}"
        parts.append(waits)
    if not parts:
        return None
    return "Memory updated: " + "; ".join(parts)


@dataclass
class _Watch:
    thread: str
    after: int  # the newest fold's id before the turn: the turn's fold is the next one
    tell: Callable[[str], None] | None  # the cell's view (None: tell the next cell)


class FoldNotices:
    """One per session: the turns waiting to hear of their thread's next fold."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.later: list[str] = []  # notes for the next cell (views that cannot redraw)
        self._watches: list[_Watch] = []
        self._lock = threading.Lock()
        self._unsubscribe = memory.on_change(self.check)

    def mark(self) -> int | None:
        """Before a turn: the newest fold so far (the turn's own fold comes after it), or
        None when the journal cannot say (the turn runs all the same, unwatched)."""
        self.check()  # a fold that kept nothing said nothing: settle the turns it ended
        try:
            folds = self.memory.history.folds(limit=1)
        except Exception:
            return None
        return int(folds[0]["id"]) if folds else 0

    def watch(self, thread: str, after: int | None, tell: Callable[[str], None] | None) -> None:
        """After a turn that will be folded: hand the thread's first fold newer than
        ``after`` to ``tell`` (the cell's view adds the line in place), or, without one,
        keep it for the next cell."""
        if after is None:
            return
        with self._lock:
            self._watches.append(_Watch(thread, after, tell))
        self.check()

    def check(self, *_: Any) -> None:
        """Tell every waiting turn whose fold has landed what it did (``on_change`` calls
        this from whichever thread changed memory)."""
        with self._lock:
            if not self._watches:
                return
            try:
                self._settle()
            except Exception:  # a locked journal, a damaged memory.json: %memory status
                log.debug("fold notices: could not read the folds", exc_info=True)

    def _settle(self) -> None:
        """Under the lock: tell the turns whose fold is in the newest records."""
        folds = self.memory.history.folds(limit=RECENT_FOLDS)
        for watch in list(self._watches):
            done = [
                f
                for f in folds
                if f.get("source") == watch.thread
                and f["id"] > watch.after
                and f.get("outcome") != "failed"  # retried: not the last word
            ]
            if done:
                fold = done[-1]  # the first one after the turn
                note = fold_note(fold, self._texts(fold), self._held(fold))
                self._watches.remove(watch)
                self._tell(note, watch)

    @property
    def watching(self) -> list[str]:
        """The threads whose next fold a turn still waits to hear of."""
        with self._lock:
            return [w.thread for w in self._watches]

    def take_later(self) -> list[str]:
        """The notes no view could show in place (a terminal's), once."""
        with self._lock:
            notes, self.later = self.later, []
        return notes

    def close(self) -> None:
        self._unsubscribe()

    def _tell(self, note: str | None, watch: _Watch) -> None:
        if note is None:
            return
        if watch.tell is None:  # the next cell may be in another project: say whose
            project = (self.memory.reader.thread(watch.thread) or {}).get("project")
            where = f" (thread {watch.thread}, project {project})" if project else ""
            self.later.append(note + where)
        else:
            watch.tell(note)

    def _held(self, fold: Mapping[str, Any]) -> list[str]:
        """What the fold's pending change would do, item by item (none once decided)."""
        change = next((p for p in self.memory.pending() if p["id"] == fold.get("pending_id")), None)
        items = self.memory.review.items(change) if change else []
        return [f"{_VERBS[i.kind]} “{i.text}”" for i in items if i.kind in _VERBS]

    def _texts(self, fold: Mapping[str, Any]) -> dict[str, str]:
        """The text of every fact the fold names: stored ones from memory, removed ones
        from their history."""
        texts = {str(f.get("id")): str(f.get("content", "")) for f in self.memory.data["facts"]}
        for fact_id in [*(fold.get("removed") or []), *(fold.get("evicted") or [])]:
            for event in reversed(self.memory.history.of(str(fact_id))):
                text = event.get("old_content") or event.get("new_content")
                if text:
                    texts[str(fact_id)] = str(text)
                    break
        return texts
