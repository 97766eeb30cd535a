"""The panel's project selector: whose facts its Facts, Preview and History tabs show.

A project's facts always come with the user's own (shared by every project) and never with
another project's, as in a turn. The selector starts on the notebook's project and follows
it (``%memory project NAME``) until the user picks another choice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w

from ..memory import Scope, project_names

# The choices besides each project (a project name cannot hold parentheses, so these
# never clash with one).
ALL_PROJECTS = "(all projects)"
USER_ONLY = "(user only)"


class ProjectPicker:
    """A dropdown of ``ALL_PROJECTS``, ``USER_ONLY`` and every project; options are plain
    text (a Dropdown never renders HTML), so project names stay text."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self.widget = w.Dropdown(description="Project", options=[USER_ONLY], value=USER_ONLY)
        self._followed = USER_ONLY  # the notebook's project at the last update
        self._quiet = False  # set while ``update`` changes the options: no redraw then
        self.widget.observe(lambda _: None if self._quiet else on_change(), names="value")

    @property
    def value(self) -> str:
        return str(self.widget.value)

    def update(self, data: dict[str, Any], active: str | None) -> None:
        """Options from memory.json's projects and the notebook's ``active`` one; the
        choice is kept unless it was the notebook's project (it follows) or is gone."""
        names = sorted(project_names(data) | ({active} if active else set()))
        options = [ALL_PROJECTS, USER_ONLY, *names]
        keep = self.value
        if keep == self._followed or keep not in options:
            keep = active or USER_ONLY
        self._followed = active or USER_ONLY
        self._quiet = True
        try:
            self.widget.options = options
            self.widget.value = keep
        finally:
            self._quiet = False

    @property
    def scope(self) -> Scope:
        """Whose facts the Facts tab lists and whose events the History tab does (memory's
        ``Scope.sees`` decides which they are)."""
        if self.value == ALL_PROJECTS:
            return Scope.everywhere()
        return Scope.of(None if self.value == USER_ONLY else self.value)

    def preview_project(self, active: str | None) -> str | None:
        """The project whose turn the Preview tab shows: the chosen one (``ALL_PROJECTS``:
        the notebook's ``active`` one, what its next turn injects; ``USER_ONLY``: none)."""
        chosen = self.value
        if chosen == ALL_PROJECTS:
            return active
        return None if chosen == USER_ONLY else chosen
