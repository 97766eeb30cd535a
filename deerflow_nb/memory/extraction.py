"""The extraction prompt, the fact handles, and a parser that never lets bad output through.

Existing facts are shown to the model as ``[f1]``, ``[f2]`` … instead of their ids: short
handles cost fewer tokens and a model cannot invent a plausible-looking id. The reply
must be DeerFlow's classic diff; anything else (no JSON, wrong types, an attempt to
close the ``</memory>`` tag) raises ``ExtractionError`` and changes nothing.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

from .store import HISTORY_SECTIONS, MEMORY_TAG, USER_SECTIONS

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
factsToRemove. Do not repeat facts that are already stored.

Output format:
{"user": {"workContext": {"summary": "...", "shouldUpdate": false},
          "personalContext": {"summary": "...", "shouldUpdate": false},
          "topOfMind": {"summary": "...", "shouldUpdate": false}},
 "history": {"recentMonths": {"summary": "...", "shouldUpdate": false},
             "earlierContext": {"summary": "...", "shouldUpdate": false},
             "longTermBackground": {"summary": "...", "shouldUpdate": false}},
 "newFacts": [{"content": "...", "category": "preference", "confidence": 0.9}],
 "factsToRemove": ["f1"]}"""


class ExtractionError(ValueError):
    """The model's reply (or a caller's diff) is not a valid extraction diff."""


def format_conversation(messages: list[dict[str, Any]]) -> str:
    """``User: …`` / ``Assistant: …`` blocks, long messages cut as DeerFlow does."""
    blocks = []
    for message in messages:
        content = str(message.get("content") or "").strip()
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
        content = " ".join(str(fact.get("content", "")).split())
        lines.append(
            f"- [{handle}] ({fact.get('category', 'context')}, {confidence:.2f}) {content}"
        )
    sections = []
    for group, names in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
        for name in names:
            summary = ((memory.get(group) or {}).get(name) or {}).get("summary") or ""
            summary = " ".join(str(summary).split())
            if summary:
                sections.append(f"{group}.{name}: {summary}")
    current = "\n".join(sections + (["Facts:"] if sections and lines else []) + lines)
    user = (
        f"<current_memory>\n{current}\n</current_memory>\n\n"
        f"<conversation>\n{format_conversation(conversation)}\n</conversation>"
    )
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ], handles


def parse_reply(text: str, handles: dict[str, str]) -> dict[str, Any]:
    """The model's reply as a validated diff whose removals name real fact ids."""
    body = (text or "").strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(1).strip()
    if not body.startswith("{"):
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            raise ExtractionError("the reply holds no JSON object")
        body = body[start : end + 1]
    try:
        raw = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ExtractionError(f"the reply is not valid JSON: {exc}") from exc
    diff = validate_diff(raw)
    mapped = []
    for handle in diff["factsToRemove"]:
        if handle in handles:
            mapped.append(handles[handle])
        else:
            log.warning("extraction named unknown fact handle %r; ignored", handle)
    diff["factsToRemove"] = mapped
    return diff


def validate_diff(raw: Any) -> dict[str, Any]:
    """A clean copy of a DeerFlow diff, or ExtractionError naming the first problem."""
    if not isinstance(raw, dict):
        raise ExtractionError("the diff must be a JSON object")
    diff: dict[str, Any] = {}
    for group, names in (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS)):
        sections = _or_default(raw.get(group), {})
        if not isinstance(sections, dict):
            raise ExtractionError(f"'{group}' must be an object")
        clean = {}
        for name in names:
            section = sections.get(name)
            if section is None:
                continue
            if not isinstance(section, dict):
                raise ExtractionError(f"'{group}.{name}' must be an object")
            summary = section.get("summary", "")
            should = section.get("shouldUpdate", False)
            if not isinstance(summary, str) or not isinstance(should, bool):
                raise ExtractionError(
                    f"'{group}.{name}' needs a text summary and a true/false shouldUpdate"
                )
            _reject_tags(summary, f"{group}.{name}")
            clean[name] = {"summary": summary, "shouldUpdate": should}
        diff[group] = clean
    facts = _or_default(raw.get("newFacts"), [])
    if not isinstance(facts, list):
        raise ExtractionError("'newFacts' must be a list")
    diff["newFacts"] = [_clean_fact(f, i) for i, f in enumerate(facts)]
    removals = _or_default(raw.get("factsToRemove"), [])
    if not isinstance(removals, list) or not all(isinstance(r, str) for r in removals):
        raise ExtractionError("'factsToRemove' must be a list of fact ids")
    diff["factsToRemove"] = list(dict.fromkeys(removals))
    return diff


def _or_default(value: Any, default: Any) -> Any:
    """A missing or null key means "nothing"; any other falsy value is still type-checked."""
    return default if value is None else value


def _clean_fact(fact: Any, i: int) -> dict[str, Any]:
    where = f"newFacts[{i}]"
    if not isinstance(fact, dict):
        raise ExtractionError(f"'{where}' must be an object")
    content = fact.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ExtractionError(f"'{where}.content' must be non-empty text")
    _reject_tags(content, where)
    confidence = fact.get("confidence", 0.5)
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not math.isfinite(confidence)
        or not 0 <= confidence <= 1
    ):
        raise ExtractionError(f"'{where}.confidence' must be a number from 0 to 1")
    category = fact.get("category", "context")
    if not isinstance(category, str):
        raise ExtractionError(f"'{where}.category' must be text")
    return {"content": content, "category": category, "confidence": float(confidence)}


def _reject_tags(text: str, where: str) -> None:
    """Text that opens or closes the memory block is an injection attempt, not a fact."""
    if MEMORY_TAG.search(text):
        raise ExtractionError(f"'{where}' contains a <memory> tag")
