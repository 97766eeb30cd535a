"""Numbers and nesting no parser here can hold, found in a model's reply before parsing.

Python refuses to read an integer of more than 4300 digits (a ``ValueError`` that is no
``JSONDecodeError``) and recurses once per nesting level (a ``RecursionError`` past about a
thousand). A fold or consolidation reply holding either was a traceback on every retry;
``check_holdable`` makes it the one-line ``ExtractionError`` a bad reply is.
"""

from __future__ import annotations

import re
import sys

from .extraction import ExtractionError

MAX_DEPTH = 64  # a diff or a merge list nests four levels; 64 is more than any reply needs
_MAX_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300
# A JSON number as a value: after ``:``, ``[`` or ``,``.
_LONG_NUMBER = re.compile(rf"[:\[,]\s*-?(\d{{{_MAX_DIGITS + 1},}})")


def check_holdable(text: str) -> None:
    """Raise ``ExtractionError`` (one line) when ``text`` holds an integer too long to read
    or brackets nested deeper than ``MAX_DEPTH`` (brackets inside strings do not count)."""
    if number := _LONG_NUMBER.search(text):
        raise ExtractionError(
            f"the reply holds a number of {len(number.group(1))} digits (at most "
            f"{_MAX_DIGITS} can be read); nothing of it was applied"
        )
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return  # cannot nest deeper: no need to scan
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ExtractionError(
                    f"the reply nests deeper than {MAX_DEPTH} levels; nothing of it was applied"
                )
        elif char in "]}":
            depth = max(depth - 1, 0)
