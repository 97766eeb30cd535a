"""Untrusted text into Markdown, timestamps and tables: what every page shows text with.

``md``, ``md_lines``, ``code`` and ``plain`` (see the package's docstring).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import streamlit as st

from ...untrusted import clean_text, escape_markdown
from .. import view_models

_PLAIN_ID = re.compile(r"[A-Za-z0-9_./-][A-Za-z0-9_./ -]{0,300}")
TIME_FORMAT = "YYYY-MM-DD HH:mm"  # tables (a 24-hour clock, UTC like the journal)


def md(text: object) -> str:
    """Untrusted text as literal Markdown on one line (for labels and inline use)."""
    return escape_markdown(text)


def md_lines(text: object) -> str:
    """Untrusted text as literal Markdown, its line breaks kept."""
    lines = (escape_markdown(line) for line in clean_text(text).splitlines())
    return "  \n".join(line for line in lines if line)


def code(text: object) -> str:
    """An id, a path or a command in code style when it is plain (letters, digits, spaces,
    ``_./-``); any other text escaped instead (a code span is literal in CommonMark, but
    Streamlit still rewrites ``:icon:`` directives inside it)."""
    text = clean_text(text)
    return f"`{text}`" if _PLAIN_ID.fullmatch(text) else md(text)


def plain(text: object, limit: int | None = None) -> str:
    """Untrusted text for a plain-text label (a select box option): one clean line."""
    line = " ".join(clean_text(text).split())
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


def clock(iso: object, *, seconds: bool = False) -> str | None:
    """An ISO timestamp as ``YYYY-MM-DD HH:MM`` (UTC, 24-hour), or as ``HH:MM:SS`` with
    ``seconds``; None when it is not one."""
    try:
        ts = datetime.fromisoformat(str(iso))
    except ValueError:
        return None
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC)
    return ts.strftime("%H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def when(iso: object, *, seconds: bool = False) -> str:
    """``clock`` for Markdown: other text escaped as it is."""
    return clock(iso, seconds=seconds) or md(iso)


def table(df: Any, **kwargs: Any) -> Any:
    """``st.dataframe`` the inspector's way: no index, and an empty cell left blank."""
    return st.dataframe(df, hide_index=True, placeholder="", **kwargs)


def time_column(label: str, width: int | str = 135) -> Any:
    """A table column of timestamps on a 24-hour clock."""
    return st.column_config.DatetimeColumn(label, format=TIME_FORMAT, width=width)


def count(n: int, word: str) -> str:
    """``1 turn``, ``2 turns``: a number with its word."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def project_picker(where: Any, memory: dict[str, Any], key: str, help: str) -> str:
    """A page's project selector in ``where`` (a column, or ``st``): every project, the
    user's only, or one project's. Project names are untrusted text: plain labels, never
    Markdown."""
    choices = view_models.project_choices(memory)
    return where.selectbox("Project", choices, key=key, format_func=plain, help=help)
