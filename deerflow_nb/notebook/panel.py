"""The memory panel: profile, facts, preview, pending changes, history and recall in one widget.

The Recall tab (a search of past conversations whose results open their thread) is its
own part, ``recall_tab.RecallTab``; the other tabs are drawn here.

Every button calls the same public ``Memory`` API as ``%memory`` and the agent, so a
click is journaled and atomic like any other change. The panel subscribes to
``memory.on_change`` and redraws itself after folds, so what it shows follows memory
without re-running the cell; changes other processes make (the inspector) it sees by
polling memory.json's ``stat`` every ``POLL_SECONDS`` and on every change of tab.
ipywidgets is imported here only, when a panel is built.

Widgets live in ipywidgets' registry (and the front-end) until closed, so the panel closes
the rows it replaces on every redraw (``widget_tree``), and ``close()`` closes the whole
panel and unsubscribes it; else every redraw and re-run cell would leave widgets behind.

An ``HTML`` widget's value is rendered as HTML, so every one built from memory or journal
text (facts, summaries, events, pending diffs, messages, errors) escapes it (``escape_html``, or a
view's already escaped ``_repr_html_``); labels, options and text boxes hold plain text.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from ..config import ConfigError
from ..memory import FactQuery, MemoryFileError, Scope
from ..projects import fact_project
from ..schema.constants import CATEGORIES
from ..untrusted import escape_html
from .project_picker import ProjectPicker
from .recall_tab import RecallTab
from .views.facts import marked, preview_view
from .views.history import EventsView
from .views.status import SummaryView, flush_summary
from .views.table import count_of
from .widget_tree import BUTTON, WIDE, close_tree, replace_children

if TYPE_CHECKING:
    from ..memory import Memory

TAB_TITLES = ("Profile", "Facts", "Preview", "Pending", "History", "Recall")
PENDING_TAB = TAB_TITLES.index("Pending")
ALL = "all"  # the Category filter's "no filter" (ipywidgets 8 shows a None value as blank)
POLL_SECONDS = 2.0  # how often a panel looks whether another process changed memory.json


class MemoryPanel:
    """An ipywidgets view of one ``Memory``; display it, or return it from a cell."""

    def __init__(
        self,
        memory: Memory,
        *,
        project: Callable[[], str | None] = lambda: None,
        history_limit: int = 50,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.memory = memory
        self.here = project  # the notebook's project, asked at every draw and passed on
        self.history_limit = history_limit
        self._seen: tuple[int, int, int] | None = None  # memory.json as last drawn
        self._lock = threading.RLock()  # folds refresh from the queue's worker thread
        self._draws = 0  # redraws so far: an action that changed memory has redrawn already
        self.closed = False
        self.unreadable = False  # memory.json could not be read at the last refresh
        self.message = w.HTML()
        self.header = w.HTML()
        self.refresh_button = w.Button(description="Refresh", icon="refresh")
        self.flush_button = w.Button(description="Flush now", tooltip="fold pending threads")
        self.refresh_button.on_click(lambda _: self._act(self._reread))
        self.flush_button.on_click(lambda _: self._act(self._flush))

        self.profile = w.HTML()
        self.project = ProjectPicker(self._draw_scoped)  # narrows Facts and Preview

        self.category = w.Dropdown(options=[ALL, *CATEGORIES], value=ALL, description="Category")
        self.min_confidence = w.FloatSlider(
            value=0.0, min=0.0, max=1.0, step=0.05, description="Min conf."
        )
        self.text_filter = w.Text(placeholder="filter by text", description="Contains")
        for control in (self.category, self.min_confidence, self.text_filter):
            control.observe(lambda _: self._draw_facts(), names="value")
        self.fact_rows = w.VBox()
        self.fact_checks: dict[str, w.Checkbox] = {}
        self.forget_button = w.Button(description="Forget selected", button_style="danger")
        self.forget_button.on_click(lambda _: self._act(self._ask_forget))
        # "Forget selected" only asks; these two answer (the ids asked about are kept, so a
        # selection changed in between forgets nothing it did not name).
        self.confirm_text = w.HTML()
        self.confirm_button = w.Button(description="Yes, forget", button_style="danger")
        self.cancel_button = w.Button(description="Cancel")
        self.confirm_button.on_click(lambda _: self._act(self._forget_confirmed))
        self.cancel_button.on_click(lambda _: self._act(self._cancel_forget))
        self.confirm_row = w.HBox(
            [self.confirm_text, self.confirm_button, self.cancel_button],
            layout=w.Layout(display="none"),
        )
        self._to_forget: list[str] = []
        self._editing: str | None = None  # the fact whose text the Edit box was filled with
        self.edit_text = w.Text(
            placeholder="select one fact, change its text",
            description="Edit",
            layout=w.Layout(**WIDE),
        )
        self.edit_button = w.Button(description="Save edit")
        self.edit_button.on_click(lambda _: self._act(self._edit_selected))
        self.add_text = w.Text(placeholder="a new fact", description="Add", layout=w.Layout(**WIDE))
        self.add_category = w.Dropdown(options=list(CATEGORIES), value="context")
        self.add_button = w.Button(description="Add fact")
        self.add_button.on_click(lambda _: self._act(self._add))

        budget = int(memory.settings.memory.max_injection_tokens)
        self.context = w.Textarea(
            placeholder="the next turn's text, for ranking",
            description="Context",
            layout=w.Layout(width="100%"),
        )
        self.budget = w.IntSlider(
            value=budget, min=50, max=max(4000, 2 * budget), step=50, description="Budget"
        )
        self.preview_count = w.HTML()
        self.preview_block = w.HTML()
        self.context.observe(lambda _: self._draw_preview(), names="value")
        self.budget.observe(lambda _: self._draw_preview(), names="value")

        self.review = w.Checkbox(description="Review mode (folds wait for approval)", indent=False)
        self.review.observe(self._on_review, names="value")
        self.pending_rows = w.VBox()
        self.pending_checks: dict[int, w.Checkbox] = {}
        # (change id, item number) → its (Approve, Reject) buttons
        self.item_buttons: dict[tuple[int, int], tuple[w.Button, w.Button]] = {}
        self.approve_button = w.Button(description="Approve selected", button_style="success")
        self.reject_button = w.Button(description="Reject selected", button_style="warning")
        self.approve_all_button = w.Button(description="Approve all")
        self.approve_button.on_click(lambda _: self._act(lambda: self._decide("approve")))
        self.reject_button.on_click(lambda _: self._act(lambda: self._decide("reject")))
        self.approve_all_button.on_click(
            lambda _: self._act(lambda: self._decide("approve", everything=True))
        )

        self.history = w.HTML()

        self.recall = RecallTab(memory, self._act, project)

        self.tabs = w.Tab(
            children=[
                self.profile,
                w.VBox([
                    w.HBox([self.category, self.min_confidence, self.text_filter]),
                    self.fact_rows,
                    w.HBox([self.forget_button, self.edit_text, self.edit_button]),
                    self.confirm_row,
                    w.HBox([self.add_text, self.add_category, self.add_button]),
                ]),
                w.VBox([self.context, self.budget, self.preview_count, self.preview_block]),
                w.VBox([
                    self.review,
                    self.pending_rows,
                    w.HBox([self.approve_button, self.reject_button, self.approve_all_button]),
                ]),
                self.history,
                self.recall.widget,
            ]
        )  # fmt: skip
        self.tabs.titles = TAB_TITLES
        self.tabs.observe(self._on_tab, names="selected_index")
        self.widget = w.VBox(
            [
                w.HBox([self.header, self.project.widget, self.refresh_button, self.flush_button]),
                self.tabs,
                self.message,
            ]
        )
        self._subscribe()
        self.refresh()
        self._watch(poll_seconds)

    # -- display ---------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return str(SummaryView(self.memory.data))

    def _subscribe(self) -> None:
        """Refresh on every memory change, without keeping a collected panel alive."""
        ref = weakref.ref(self)

        def on_change(*_: Any, **__: Any) -> None:
            panel = ref()
            if panel is not None:
                panel.refresh()

        self._unsubscribe = self.memory.on_change(on_change)
        weakref.finalize(self, self._unsubscribe)

    def _watch(self, seconds: float) -> None:
        """Follow changes other processes make (the inspector's edits, another kernel's
        folds): every ``seconds``, a ``stat`` of memory.json, and a redraw when it is not
        the file last drawn. The thread holds the panel weakly and ends with it."""
        ref = weakref.ref(self)
        self._stop = threading.Event()
        stop = self._stop

        def watch() -> None:
            while not stop.wait(seconds):
                panel = ref()
                if panel is None or panel.closed:
                    return
                panel.refresh_if_changed()
                del panel

        threading.Thread(target=watch, name="deerflow-nb-panel-watch", daemon=True).start()

    def _file_state(self) -> tuple[int, int, int] | None:
        try:
            st = self.memory.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def refresh_if_changed(self) -> bool:
        """Redraw when memory.json is not the file the panel last drew; True if it did."""
        if self._file_state() == self._seen:
            return False
        self.refresh()
        return True

    def close(self) -> None:
        """Stop following memory and close every widget of the panel (its view goes blank)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._stop.set()
            self._unsubscribe()
            close_tree(self.widget)

    # -- drawing ---------------------------------------------------------------------
    def refresh(self) -> None:
        """Redraw every tab from memory as it is on disk now (nothing, once closed)."""
        with self._lock:
            if self.closed:
                return
            self._draws += 1
            self._seen = self._file_state()  # before reading: a write in between shows next
            try:
                data = self.memory.data
            except MemoryFileError as exc:  # a damaged memory.json: say so, keep the rest
                self.unreadable = True
                self.header.value = "<b>Memory</b> — memory.json cannot be read"
                self._say_error(exc)
                return
            try:
                pending = self.memory.pending_count()
            except ConfigError as exc:  # the home removed or its journal locked: say so
                self.unreadable = True
                self.header.value = "<b>Memory</b> — journal.db cannot be read"
                self._say_error(exc)
                return
            self.unreadable = False
            self._facts = list(data.get("facts", []))
            verb = "awaits" if pending == 1 else "await"
            waiting = f" · {count_of(pending, 'change')} {verb} review" if pending else ""
            project = self.here()
            where = f" · project {escape_html(project)}" if project else ""
            # The notebook's project sees its facts and the user's, not another project's.
            seen = FactQuery(sort="none", scope=Scope.of(project)).run(self._facts)
            facts = count_of(len(seen), "fact")
            self.header.value = f"<b>Memory</b> — {facts}{where}{waiting}"
            titles = list(TAB_TITLES)
            titles[PENDING_TAB] += f" ({pending})" if pending else ""
            self.tabs.titles = tuple(titles)
            self.profile.value = SummaryView(data)._repr_html_()
            self.project.update(data, project)
            self._draw_scoped()
            self._draw_pending()

    def _draw_scoped(self) -> None:
        self._draw_facts()
        self._draw_preview()
        scope = self.project.scope
        folds = tuple(self.memory.history.folds(limit=10, scope=scope))
        events = tuple(self.memory.events(limit=self.history_limit, scope=scope))
        self.history.value = EventsView(events, folds=folds, projects=scope.every)._repr_html_()

    def visible_facts(self) -> list[dict[str, Any]]:
        """The facts the Facts tab lists under the current filters and project."""
        category = self.category.value
        return FactQuery(
            categories=() if category == ALL else (category,),
            min_confidence=self.min_confidence.value,
            text=self.text_filter.value,
            scope=self.project.scope,
        ).run(self._facts)

    def _draw_facts(self) -> None:
        selected = {fid for fid, box in self.fact_checks.items() if box.value}
        self.fact_checks = {}
        rows = []
        for fact in self.visible_facts():
            box = w.Checkbox(
                value=fact["id"] in selected, indent=False, layout=w.Layout(width="28px")
            )
            box.observe(self._on_select, names="value")
            self.fact_checks[fact["id"]] = box
            conf = float(fact.get("confidence") or 0.0)
            rows.append(
                w.HBox([
                    box,
                    w.FloatProgress(value=conf, min=0.0, max=1.0,
                                    layout=w.Layout(width="90px")),
                    w.HTML(f"<code>{conf:.2f}</code> <small>{escape_html(fact['id'])}</small>"),
                    w.HTML(f"<i>{escape_html(str(fact.get('category', '')))}</i>"),
                    w.HTML(f"<small>{escape_html(fact_project(fact) or 'user')}</small>"),
                    w.HTML(escape_html(marked(fact, str(fact.get("content", ""))))),
                ])
            )  # fmt: skip
        replace_children(self.fact_rows, rows or [w.HTML("<i>No facts.</i>")])
        if self._editing is not None and not any(f["id"] == self._editing for f in self._facts):
            self._editing = None  # forgotten (here or elsewhere): its text goes too
            self.edit_text.value = ""

    def _draw_preview(self) -> None:
        try:
            view = preview_view(
                self.memory,
                self.context.value or None,
                self.budget.value,
                project=self.project.preview_project(self.here()),
            )
        except MemoryFileError as exc:  # typed into the context box: no cell to raise into
            self._say_error(exc)
            return
        self.last_preview = view
        self.preview_count.value = f"<b>{escape_html(view.header)}</b>"
        body = view.body
        self.preview_block.value = f"<pre>{escape_html(body)}</pre>"

    def _draw_pending(self) -> None:
        """Each change with a box (for the buttons below the list), then each fact it adds,
        removes or merges and each section it rewrites, in full, with its own Approve and
        Reject (the rest of the change keeps waiting)."""
        self.review.unobserve(self._on_review, names="value")
        self.review.value = bool(self.memory.review.enabled)
        self.review.observe(self._on_review, names="value")
        self.pending_checks = {}
        self.item_buttons = {}
        rows: list[w.Widget] = []
        for change in self.memory.pending():
            box = w.Checkbox(indent=False, layout=w.Layout(width="28px"))
            self.pending_checks[change["id"]] = box
            head = f"<b>#{escape_html(change['id'])}</b> from {escape_html(change['source'])}"
            rows.append(w.HBox([box, w.HTML(head)]))
            for item in self.memory.review.items(change):
                buttons = tuple(
                    self._item_button(verb, change["id"], item.number)
                    for verb in ("approve", "reject")
                )
                self.item_buttons[(change["id"], item.number)] = buttons
                text = w.HTML(
                    f"{item.number}. {escape_html(item.reading())}",
                    layout=w.Layout(flex="1 1 0%", min_width="0"),  # the text wraps
                )
                rows.append(w.HBox([*buttons, text], layout=w.Layout(margin="0 0 0 28px")))
        replace_children(self.pending_rows, rows or [w.HTML("<i>No pending changes.</i>")])

    def _item_button(self, verb: str, change_id: int, number: int) -> w.Button:
        button = w.Button(
            description=verb.capitalize(),
            button_style="success" if verb == "approve" else "",
            tooltip=f"{verb} only item {number} of change #{change_id}",
            layout=w.Layout(**BUTTON),
        )
        button.on_click(lambda _: self._act(lambda: self._decide_item(verb, change_id, number)))
        return button

    # -- actions ---------------------------------------------------------------------
    def _act(self, action: Any) -> None:
        """Run one action; show its outcome (or error) in one line instead of raising."""
        draws = self._draws
        try:
            note = action()
        except (KeyError, ValueError, MemoryFileError) as exc:
            self._say_error(exc)
            return
        if self._draws == draws:  # nothing changed memory, so on_change did not redraw
            self.refresh()
        if self.unreadable:
            return  # the redraw said why, which is the news
        self.message.value = escape_html(note or "")

    def _say_error(self, exc: BaseException) -> None:
        self.message.value = f"<span style='color:#b91c1c'>{escape_html(str(exc))}</span>"

    def _reread(self) -> str:
        self.refresh()
        return "Read memory again"

    def selected_fact_ids(self) -> list[str]:
        return [fid for fid, box in self.fact_checks.items() if box.value]

    def _on_select(self, _: Any) -> None:
        self._hide_confirm()  # the question named the old selection
        ids = self.selected_fact_ids()
        if len(ids) == 1:
            self._editing = ids[0]
            self.edit_text.value = next(f["content"] for f in self._facts if f["id"] == ids[0])
        elif self._editing is not None:  # the box no longer speaks for one selected fact
            self._editing = None
            self.edit_text.value = ""

    def _ask_forget(self) -> str:
        """The first click: ask before anything is removed."""
        ids = self.selected_fact_ids()
        if not ids:
            raise ValueError("select the facts to forget first")
        self._to_forget = ids
        self.confirm_text.value = (
            f"<b>Forget {count_of(len(ids), 'fact')}?</b> "
            f"<small>{escape_html(', '.join(ids))}</small>"
        )
        self.confirm_row.layout.display = "flex"
        return ""

    def _forget_confirmed(self) -> str:
        ids, self._to_forget = self._to_forget, []
        self._hide_confirm()
        if not ids:
            raise ValueError("select the facts to forget first")
        self.memory.facts.forget_many(ids)
        return (
            f"Forgot {count_of(len(ids), 'fact')}: {', '.join(ids)} "
            "(%memory rollback restores them)"
        )

    def _cancel_forget(self) -> str:
        self._hide_confirm()
        return "Nothing forgotten"

    def _hide_confirm(self) -> None:
        self._to_forget = []
        self.confirm_row.layout.display = "none"
        self.confirm_text.value = ""

    def _on_tab(self, _: Any) -> None:
        """A new tab starts with no word about what was done in another, and shows memory
        as it is now (another process may have changed it since the last poll)."""
        self.message.value = ""
        self._hide_confirm()
        self.refresh_if_changed()

    def _edit_selected(self) -> str:
        ids = self.selected_fact_ids()
        if len(ids) != 1:
            raise ValueError("select exactly one fact to edit")
        text = self.edit_text.value.strip()
        if not text:
            raise ValueError("type the fact's new text first")
        self.memory.facts.edit(ids[0], text)
        return f"Edited {ids[0]}"

    def _add(self) -> str:
        text = self.add_text.value.strip()
        if not text:
            raise ValueError("type the fact to add first")
        fact = self.memory.add_fact(text, category=self.add_category.value)
        self.add_text.value = ""
        return f"Added {fact['id']}"

    def _flush(self) -> str:
        return flush_summary(self.memory.flush())

    def _decide(self, verb: str, everything: bool = False) -> str:
        ids: list[int] | str = (
            "all" if everything else [pid for pid, box in self.pending_checks.items() if box.value]
        )
        if not ids:
            raise ValueError(f"select the changes to {verb} first")
        count = getattr(self.memory.review, verb)(ids)
        done = {"approve": "Approved", "reject": "Rejected"}[verb]
        return f"{done} {count} change{'s' * (count != 1)}"

    def _decide_item(self, verb: str, change_id: int, number: int) -> str:
        decide = getattr(self.memory.review, f"{verb}_items")  # approve_items, reject_items
        done = {"approve": "Approved", "reject": "Rejected"}[verb]
        if not decide(change_id, [number]):
            return f"Nothing {done.lower()}: change #{change_id} was decided meanwhile"
        return f"{done} item {number} of change #{change_id}"

    def _on_review(self, change: dict[str, Any]) -> None:
        self.memory.review.enabled = bool(change["new"])
        self.message.value = f"Review mode {'on' if change['new'] else 'off'}"
