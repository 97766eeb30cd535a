"""Widget plumbing the panel and its tabs share: closing replaced widgets, a wide layout.

A widget stays in ipywidgets' registry (and the front-end) until it is closed, with its
children and its layout and style widgets. The panel and its Recall tab replace rows on
every redraw; these close what they replace, so no redraw and no re-run cell leaves
widgets behind.
"""

from __future__ import annotations

import ipywidgets as w

WIDE = {"width": "auto", "flex": "1 1 auto"}  # a text box taking the rest of its row
# A button beside long text: its own width, never squeezed to "Ap…" by the text's flex.
BUTTON = {"width": "auto", "min_width": "80px", "flex": "0 0 auto"}


def replace_children(box: w.Box, children: list[w.Widget]) -> None:
    """Show ``children`` in ``box`` and close the widgets they replace."""
    old = box.children
    box.children = children
    for child in old:
        close_tree(child)


def close_tree(widget: w.Widget) -> None:
    """Close ``widget`` and everything it holds: its children and its own layout and style
    widgets (``close`` alone closes none of them)."""
    for child in getattr(widget, "children", ()):
        close_tree(child)
    for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
        if isinstance(part, w.Widget):
            part.close()
    widget.close()
