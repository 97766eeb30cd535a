"""The memory panel's Recall tab: search past conversations, and open a result's thread.

Each result gets a button that shows its thread in the tab (``views.recall``'s
``ThreadTranscript``: the user messages and final replies recall searches, in order, the
found one marked). Everything shown is journal text, untrusted: the HTML widgets hold the
views' escaped HTML, and button labels are plain text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from ..memory import RECALL_K
from ..untrusted import clean_text
from .views.recall import RecallResults, thread_transcript
from .views.table import count_of, short
from .widget_tree import WIDE, replace_children

if TYPE_CHECKING:
    from ..memory import Memory

Act = Callable[[Callable[[], str]], None]  # the panel's way to run a click: errors said, not raised


class RecallTab:
    """The tab's widgets and clicks; ``act`` runs each click as the panel runs its own."""

    def __init__(
        self, memory: Memory, act: Act, project: Callable[[], str | None] = lambda: None
    ) -> None:
        self.memory = memory
        self.here = project  # the notebook's project: its threads are searched
        self.query = w.Text(
            placeholder="words from a past conversation",
            description="Recall",
            layout=w.Layout(**WIDE),
        )
        self.button = w.Button(description="Search", icon="search")
        self.button.on_click(lambda _: act(self.search))
        self.results = w.HTML()
        self.open_buttons: list[w.Button] = []
        self.links = w.HBox(layout=w.Layout(flex_flow="row wrap"))
        self.transcript = w.HTML()
        self.close_button = w.Button(description="Close thread", icon="times")
        self.close_button.on_click(lambda _: act(self.close_thread))
        self.thread_box = w.VBox(
            [self.transcript, self.close_button], layout=w.Layout(display="none")
        )
        self.widget = w.VBox(
            [w.HBox([self.query, self.button]), self.results, self.links, self.thread_box]
        )
        self._act = act

    def search(self) -> str:
        """List the messages that match the query, each with a button to open its thread."""
        query = self.query.value.strip()
        if not query:
            raise ValueError("type words to look for in past conversations first")
        here = self.here()
        results = self.memory.recall(query, k=RECALL_K, project=here)
        miss = [] if results else self.memory.recall(query, k=1, project=here, relevant_only=False)
        view = RecallResults(
            query, tuple(results), numbered=True, nearest=miss[0] if miss else None
        )
        self.results.value = view._repr_html_()
        self.open_buttons = [self._open_button(rank, r) for rank, r in enumerate(results, 1)]
        label = [w.Label("Open the thread of:")] if results else []
        replace_children(self.links, [*label, *self.open_buttons])
        self.close_thread()
        return f"Recall: {count_of(len(results), 'message')} found"

    def _open_button(self, rank: int, result: Mapping[str, Any]) -> w.Button:
        thread, seq = str(result.get("thread") or ""), result.get("seq")
        button = w.Button(
            description=f"{rank}. {short(clean_text(thread), 24)}",
            tooltip=clean_text(f"open thread {thread} at message #{seq}"),
            layout=w.Layout(width="auto"),
        )
        button.on_click(lambda _: self._act(lambda: self.open_thread(thread, seq)))
        return button

    def open_thread(self, thread: str, seq: int | None = None) -> str:
        """Show ``thread`` in the tab, the message ``seq`` marked."""
        view = thread_transcript(self.memory, thread, seq)
        self.transcript.value = view._repr_html_()
        self.thread_box.layout.display = "flex"
        return clean_text(view.title)

    def close_thread(self) -> str:
        self.transcript.value = ""
        self.thread_box.layout.display = "none"
        return "Closed the thread"
