"""The part of a found message worth showing: around the words that matched the query.

Recall finds a message by a few of its words; a row that starts at the message's start
often cuts before them. Every view of recall results (``%memory recall``, the panel, the
inspector) shows the same excerpt.
"""

from __future__ import annotations

from .terms import WORD_RE, analyze

LEAD = 0.25  # of the width, shown before the first matching word
_SCAN_WORDS = 2000  # words looked at for a match: a longer message shows its start


def excerpt(text: str, query: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters: from shortly before its first
    word sharing a stem with ``query``, with an ellipsis where cut."""
    line = " ".join(str(text or "").split())
    if len(line) <= width:
        return line
    start = _first_match(line, query)
    if start > 0:
        start = max(0, start - int(width * LEAD))
        if start > 0:  # begin on a word: after the space before ``start``
            start = line.rfind(" ", 0, start) + 1
    head = "…" if start > 0 else ""
    piece = line[start:]
    room = width - len(head)
    return head + (piece if len(piece) <= room else piece[: room - 1] + "…")


def _first_match(line: str, query: str) -> int:
    """Where the first word of ``line`` whose stem is one of the query's begins (0: none)."""
    wanted = set(analyze(query))
    if not wanted:
        return 0
    for number, match in enumerate(WORD_RE.finditer(line)):
        if number >= _SCAN_WORDS:
            break
        if wanted.intersection(analyze(match.group(0))):
            return match.start()
    return 0
