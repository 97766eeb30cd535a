"""A model's JSON reply, read defensively: what a fold and a consolidation both parse.

``check_holdable`` finds what no parser here can hold before parsing: Python refuses to
read an integer of more than 4300 digits (a ``ValueError`` that is no ``JSONDecodeError``)
and recurses once per nesting level (a ``RecursionError`` past about a thousand); a reply
holding either was a traceback on every retry, and is the one-line ``ExtractionError`` a
bad reply is. ``load_reply`` then finds the JSON value (the most diff-like object among
prose and decoys, repaired when cut off) and where a truncated reply stopped.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```\s*$", re.DOTALL)


class ExtractionError(ValueError):
    """The model's reply (or a caller's diff) is not a valid extraction diff."""


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


def load_reply(text: str) -> tuple[Any, tuple[str, ...] | None]:
    """The reply's JSON value (repaired when needed), and where it was cut off: the path of
    the item a truncated reply was writing (``("newFacts", 2)``), or None when complete."""
    body = (text or "").strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(1).strip()
    start = body.find("{")
    if start < 0:
        raise ExtractionError("the reply holds no JSON object")
    end = body.rfind("}")
    if end > start:
        try:
            return json.loads(body[start : end + 1]), None
        except json.JSONDecodeError:
            pass
        found = _best_object(body[start : end + 1])
        if found is not None:
            return found, None
    import json_repair

    try:
        raw = json_repair.loads(body[start:])
    except Exception as exc:  # the repairer gave up: this is no diff
        raise ExtractionError(f"the reply is not JSON, even repaired ({exc})") from None
    if isinstance(raw, list):  # prose between several objects: the first diff-like one
        raw = next((v for v in raw if isinstance(v, dict)), raw)
    return raw, _cut_path(body[start:])


ITEM_LISTS = ("newFacts", "factsToRemove")
_SHAPES = {"user": dict, "history": dict, "newFacts": list, "factsToRemove": list, "merges": list}
MAX_CANDIDATES = 64  # JSON objects tried in one reply


def _best_object(body: str) -> dict[str, Any] | None:
    """Of the complete JSON objects in ``body`` (prose, an example, then the diff), the one
    most like a diff or a merges reply: an example or decoy object before the real one
    must not hide it. None when no object has a key of the right shape."""
    decoder = json.JSONDecoder()
    best, best_score = None, 0
    at, tried = body.find("{"), 0
    while at >= 0 and tried < MAX_CANDIDATES:
        tried += 1
        try:
            value, end = decoder.raw_decode(body, at)
        except (json.JSONDecodeError, RecursionError):
            at = body.find("{", at + 1)
            continue
        if isinstance(value, dict):
            score = sum(
                1 + (len(value[k]) if isinstance(value[k], list) else 0)
                for k, shape in _SHAPES.items()
                if isinstance(value.get(k), shape)
            )
            if score and score >= best_score:  # the later of equals: examples come first
                best, best_score = value, score
        at = body.find("{", end)
    return best


def _cut_path(body: str) -> tuple[str, ...] | None:
    """Scan JSON-ish text; None when every container closes, else the open item's path:
    ``(list key, index)`` for an element still open in newFacts/factsToRemove, ``(group,
    section)`` for a section object still open."""
    frames: list[list[Any]] = []  # [kind, key or index, expecting key / fresh element]
    quote: str | None = None
    chars: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
                top = frames[-1] if frames else None
                if top is not None and top[0] == "{" and top[2]:
                    top[1] = "".join(chars)
            else:
                chars.append(c)
            i += 1
            continue
        top = frames[-1] if frames else None
        starts_value = c in "{[\"'" or not (c.isspace() or c in ",:}]")
        if starts_value and top is not None and top[0] == "[" and top[2]:
            top[1] += 1
            top[2] = False
        if c in "\"'":
            quote, chars = c, []
        elif c == "{":
            frames.append(["{", None, True])
        elif c == "[":
            frames.append(["[", -1, True])
        elif c in "}]":
            if frames:
                frames.pop()
        elif c == ":":
            if top is not None and top[0] == "{":
                top[2] = False
        elif c == "," and top is not None:
            top[2] = True
        i += 1
    if not frames and quote is None:
        return None
    if len(frames) < 2 or frames[0][0] != "{":
        return ()
    key = frames[0][1]
    second = frames[1]
    if key in ITEM_LISTS and second[0] == "[" and second[1] >= 0 and not second[2]:
        element_open = len(frames) > 2 or quote is not None
        return (key, second[1]) if element_open else ()
    if key in ("user", "history") and second[0] == "{" and len(frames) > 2 and second[1]:
        return (key, second[1])
    return ()
