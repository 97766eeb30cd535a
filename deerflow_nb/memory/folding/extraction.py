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

import logging
from typing import Any

from ...schema.constants import HISTORY_SECTIONS, USER_SECTIONS
from ...schema.diff import ExtractionDiff, LeftOut, NotADiff
from ...untrusted import prompt_text
from ..model_reply import ITEM_LISTS, ExtractionError, load_reply

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 2000

SYSTEM_PROMPT = """You are a memory management system. Analyze the conversation and update the \
user's memory profile. Reply with ONE JSON object and nothing else.

Sections (set shouldUpdate=true only when there is meaningful new information). The user
and history sections are shown in every project: write there only what holds in every
project, never this project's data, names, codenames, numbers or decisions (those go in
projectContext and the project's facts):
- user.workContext: role, company, main technologies (1-3 sentences)
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
    """The removals that may apply, and the ones left out because a ``newFacts`` item was
    malformed (as DeerFlow, ``updater.py``: removals beside a malformed new fact fail
    closed, since which stored fact it was meant to replace cannot be known; the valid
    rest of the diff applies). A removal naming no stored fact goes on, to be reported
    as that."""
    if not diff.malformed or not diff.facts_to_remove:
        return list(diff.facts_to_remove), []
    by_id = {str(f.get("id")): str(f.get("content", "")) for f in memory.get("facts", [])}
    left = [
        {
            "item": f"remove {fact_id}",
            "reason": "a new fact in the same change is malformed and may have been its "
            "replacement; kept until a valid one comes",
            "value": by_id[fact_id][:80],
        }
        for fact_id in diff.facts_to_remove
        if fact_id in by_id
    ]
    unknown = [i for i in diff.facts_to_remove if i not in by_id]  # reported as such
    return unknown, left


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


def _drop_cut_item(raw: Any, cut: tuple[str, ...]) -> list[LeftOut]:
    """Drop the item a cut-off reply was in the middle of writing (the repairer closes it,
    but its text or confidence may be half there): complete items are kept."""
    if not isinstance(raw, dict) or not cut:
        return []
    reason = "cut off: the reply ended in the middle of it (max_tokens reached?)"
    head = cut[0]
    if head in ITEM_LISTS and len(cut) >= 2:
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
