"""The memory panel follows changes another process makes (the inspector's edits), without
its Refresh button: by polling memory.json's ``stat``, and on a change of tab. ipywidgets
on a dummy comm (as ``test_widgets``), real Memory objects on one home."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import comm
import pytest
from waiting import wait_until

from deerflow_nb.memory import Memory
from deerflow_nb.notebook.panel import MemoryPanel


class DummyComm:
    kernel = "truthy"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.comm_id = uuid.uuid4().hex

    def open(self, *args: Any, **kwargs: Any) -> None:
        pass

    def on_msg(self, *args: Any, **kwargs: Any) -> None:
        pass

    def send(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture(autouse=True)
def dummy_comm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: DummyComm())


@pytest.fixture
def kernel_and_inspector(home: Path) -> Iterator[tuple[Memory, Memory]]:
    """The kernel's Memory and another one on the same home, as the inspector opens it
    (its writes never reach the kernel's ``on_change``)."""
    kernel, inspector = Memory(home), Memory(home)
    yield kernel, inspector
    inspector.close()
    kernel.close()


def texts(panel: MemoryPanel) -> list[str]:
    return sorted(f["content"] for f in panel.visible_facts())


def test_the_panel_sees_another_process_edit_without_refresh(
    kernel_and_inspector: tuple[Memory, Memory],
) -> None:
    kernel, inspector = kernel_and_inspector
    kernel.add_fact("Prefers polars over pandas", category="preference")
    panel = MemoryPanel(kernel, poll_seconds=0.05)
    try:
        assert texts(panel) == ["Prefers polars over pandas"]
        fact = inspector.facts.list()[0]
        inspector.facts.edit(fact["id"], "Prefers polars for data frames")
        inspector.add_fact("Lives in Lisbon", category="context")
        wait_until(
            lambda: texts(panel) == ["Lives in Lisbon", "Prefers polars for data frames"],
            what="the panel to redraw from the inspector's writes",
        )
        draws = panel._draws
        assert not panel.refresh_if_changed() and panel._draws == draws  # unchanged: no redraw
    finally:
        panel.close()


def test_a_change_of_tab_shows_memory_as_it_is_now(
    kernel_and_inspector: tuple[Memory, Memory],
) -> None:
    kernel, inspector = kernel_and_inspector
    panel = MemoryPanel(kernel, poll_seconds=3600)  # the poll will not come first
    try:
        assert texts(panel) == []
        inspector.add_fact("Works on churn models", category="context")
        assert texts(panel) == []
        panel.tabs.selected_index = 1  # the Facts tab
        assert texts(panel) == ["Works on churn models"]
    finally:
        panel.close()
