"""The extraction prompt, the fact handles, and a parser that keeps every valid item.

Existing facts are shown to the model as ``[f1]``, ``[f2]`` … instead of their ids: short
handles cost fewer tokens and a model cannot invent a plausible-looking id. The reply
should be DeerFlow's classic diff. Near-JSON is repaired (``json-repair``: code fences,
prose around the object, trailing commas, single quotes, a reply cut off by max_tokens,
whose half-written last item is dropped), then checked item by item against the typed
schema (``deerflow_nb.schema.diff.ExtractionDiff``): an invalid fact, removal or section is left
out with its reason and the rest applies. Only a reply that is no diff at all raises
``ExtractionError`` and changes nothing (the fold is retried, bounded).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from ..schema.constants import HISTORY_SECTIONS, USER_SECTIONS
from ..schema.diff import ExtractionDiff, LeftOut, NotADiff
from ..similarity import overlap
from ..untrusted import prompt_text

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 2000
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```\s*$", re.DOTALL)

SYSTEM_PROMPT = """You are a memory management system. Analyze the conversation and update the \
user's memory profile. Reply with ONE JSON object and nothing else.

Sections (set shouldUpdate=true only when there is meaningful new information):
- user.workContext: role, company, key projects, main technologies (1-3 sentences)
- user.personalContext: languages, communication preferences, interests (1-2 sentences)
- user.topOfMind: several current focus areas and priorities (3-5 sentences)
- history.recentMonths / history.earlierContext / history.longTermBackground

Facts: specific and third person ("Prefers polars over pandas"), with proper nouns and
versions kept. Categories: preference, knowledge, context, behavior, goal, correction.
Confidence: 0.9-1.0 explicitly stated, 0.7-0.8 strongly implied, 0.5-0.6 inferred.
Existing facts are listed as "- [handle] (category, confidence) content". Put the handle
of every fact the conversation contradicts, or that the user asks to forget, in
factsToRemove. Do not repeat facts that are already stored, except one the user states
again in this conversation: list it again (it is counted as confirmed, not duplicated).

Label every fact with its scope and durability:
- scope "user": true of the user in every project (who they are, what they prefer, know,
  use, their habits and skills); "project": about the project this notebook belongs to
  (its data files, columns and what they mean, targets, metrics and results, decisions,
  conventions, the people on it).
- durability "durable": will still hold in weeks; "one-time": an instruction for this
  cell, answer, plot or session ("use 3 decimals for this cell", "just now", "this time").
Durable facts are stored: the user's for every project, a project's for this project
only. One-time ones stay in the conversation. projectContext is this project's short
summary (1-3 sentences: its goal, data and state); update it when the project changed.

Output format:
{"user": {"workContext": {"summary": "...", "shouldUpdate": false},
          "personalContext": {"summary": "...", "shouldUpdate": false},
          "topOfMind": {"summary": "...", "shouldUpdate": false}},
 "history": {"recentMonths": {"summary": "...", "shouldUpdate": false},
             "earlierContext": {"summary": "...", "shouldUpdate": false},
             "longTermBackground": {"summary": "...", "shouldUpdate": false}},
 "projectContext": {"summary": "...", "shouldUpdate": false},
 "newFacts": [{"content": "...", "category": "preference", "confidence": 0.9,
               "scope": "user", "durability": "durable"}],
 "factsToRemove": ["f1"]}"""


class ExtractionError(ValueError):
    """The model's reply (or a caller's diff) is not a valid extraction diff."""


def format_conversation(messages: list[dict[str, Any]]) -> str:
    """``User: …`` / ``Assistant: …`` blocks, long messages cut as DeerFlow does, each
    through the prompt boundary (a ``User:`` line inside a reply is marked as quoted)."""
    blocks = []
    for message in messages:
        content = prompt_text(message.get("content") or "").strip()
        if len(content) > MAX_MESSAGE_CHARS:
            content = content[:MAX_MESSAGE_CHARS] + "..."
        label = "User" if message.get("role") == "user" else "Assistant"
        blocks.append(f"{label}: {content}")
    return "\n\n".join(blocks)


def build_messages(
    memory: dict[str, Any], conversation: list[dict[str, Any]]
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The extraction messages and the ``handle -> fact id`` map used in them."""
    handles: dict[str, str] = {}
    lines = []
    for i, fact in enumerate(memory.get("facts", []), start=1):
        handle = f"f{i}"
        handles[handle] = str(fact.get("id"))
        confidence = float(fact.get("confidence", 0.0))
        content = prompt_text(fact.get("content", ""), one_line=True)
        category = prompt_text(fact.get("category", "context"), one_line=True)
        lines.append(f"- [{handle}] ({category}, {confidence:.2f}) {content}")
    sections = []
    for group, names in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
        for name in names:
            summary = ((memory.get(group) or {}).get(name) or {}).get("summary") or ""
            summary = prompt_text(summary, one_line=True)
            if summary:
                sections.append(f"{group}.{name}: {summary}")
    project = memory.get("projectContext")  # scopes.visible: the fold's project
    if isinstance(project, dict) and project.get("summary"):
        sections.append(f"projectContext: {prompt_text(project['summary'], one_line=True)}")
    current = "\n".join(sections + (["Facts:"] if sections and lines else []) + lines)
    user = (
        f"<current_memory>\n{current}\n</current_memory>\n\n"
        f"<conversation>\n{format_conversation(conversation)}\n</conversation>"
    )
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ], handles


def parse(text: str, handles: dict[str, str] | None = None) -> ExtractionDiff:
    """The model's reply as a typed diff whose removals name real fact ids; what could not
    be used is in ``left_out``. ``ExtractionError`` only when the reply is no diff at all."""
    raw, cut = load_reply(text)
    cut_out: list[LeftOut] = []
    if cut is not None:
        cut_out = _drop_cut_item(raw, cut)
    diff = check_diff(raw)
    diff.left_out[:0] = cut_out
    if handles is not None:
        mapped: list[str] = []
        for i, handle in enumerate(diff.facts_to_remove):
            fact_id = handles.get(handle)
            if fact_id is None:
                log.warning("extraction named unknown fact handle %r; ignored", handle)
                diff.left_out.append(
                    LeftOut(
                        item=f"factsToRemove[{i}]",
                        reason="names no stored fact (unknown handle)",
                        value=handle[:80],
                    )
                )
            elif fact_id not in mapped:
                mapped.append(fact_id)
        diff.facts_to_remove = mapped
    return diff


def paired_removals(
    diff: ExtractionDiff, memory: dict[str, Any]
) -> tuple[list[str], list[dict[str, str]]]:
    """The removals that may apply, and the ones left out because their replacement was
    malformed (as DeerFlow: the pair fails closed, the rest of the diff applies).

    A removal pairs with a malformed ``newFacts`` item that shares most of its subject
    words, or with any malformed item that has no readable text (it could replace anything).
    """
    if not diff.malformed or not diff.facts_to_remove:
        return list(diff.facts_to_remove), []
    by_id = {str(f.get("id")): str(f.get("content", "")) for f in memory.get("facts", [])}
    kept, left = [], []
    for fact_id in diff.facts_to_remove:
        content = by_id.get(fact_id, "")
        if any(not text.strip() or overlap(content, text) >= 0.5 for text in diff.malformed):
            left.append(
                {
                    "item": f"remove {fact_id}",
                    "reason": "its replacement in newFacts is malformed; kept until a valid "
                    "one comes",
                    "value": content[:80],
                }
            )
        else:
            kept.append(fact_id)
    return kept, left


def parse_reply(text: str, handles: dict[str, str]) -> dict[str, Any]:
    """``parse`` as DeerFlow's plain dict (without what was left out)."""
    return parse(text, handles).to_dict()


def check_diff(raw: Any) -> ExtractionDiff:
    """A diff value (a caller's, or a parsed reply) checked item by item."""
    if isinstance(raw, ExtractionDiff):
        return raw
    try:
        return ExtractionDiff.parse(raw)
    except NotADiff as exc:
        raise ExtractionError(str(exc)) from None


def validate_diff(raw: Any) -> dict[str, Any]:
    """The valid items of a DeerFlow diff as a clean dict; ExtractionError if it is none."""
    return check_diff(raw).to_dict()


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


_ITEM_LISTS = ("newFacts", "factsToRemove")
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


def _drop_cut_item(raw: Any, cut: tuple[str, ...]) -> list[LeftOut]:
    """Drop the item a cut-off reply was in the middle of writing (the repairer closes it,
    but its text or confidence may be half there): complete items are kept."""
    if not isinstance(raw, dict) or not cut:
        return []
    reason = "cut off: the reply ended in the middle of it (max_tokens reached?)"
    head = cut[0]
    if head in _ITEM_LISTS and len(cut) >= 2:
        items = raw.get(head)
        if isinstance(items, list) and items and len(items) == int(cut[1]) + 1:
            value = items.pop()
            shown = value.get("content", value) if isinstance(value, dict) else value
            return [LeftOut(item=f"{head}[{cut[1]}]", reason=reason, value=str(shown)[:80])]
    if head in ("user", "history") and len(cut) >= 2:
        sections = raw.get(head)
        if isinstance(sections, dict) and cut[1] in sections:
            sections.pop(cut[1])
            return [LeftOut(item=f"{head}.{cut[1]}", reason=reason)]
    return []


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
    if key in _ITEM_LISTS and second[0] == "[" and second[1] >= 0 and not second[2]:
        element_open = len(frames) > 2 or quote is not None
        return (key, second[1]) if element_open else ()
    if key in ("user", "history") and second[0] == "{" and len(frames) > 2 and second[1]:
        return (key, second[1])
    return ()
