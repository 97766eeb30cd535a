"""The extraction diff: DeerFlow's classic diff checked item by item (``ExtractionDiff.parse``).

An invalid fact, removal or section is left out with a reason (``LeftOut``) and the valid
rest is kept; only a reply that is not a diff at all raises ``NotADiff``. The scope gate
(a fact labelled task-only or one-time) leaves facts out here too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from ..scrub import encodable_deep
from .constants import CATEGORIES, DIFF_KEYS, PROMPT_TAG, SECTION_GROUPS


class NotADiff(ValueError):
    """The value is not an extraction diff at all (no object, none of DeerFlow's keys)."""


def _number(value: Any) -> Any:
    """Numbers and numeric strings ("0.9", " 1 ") as floats; true/false are not numbers."""
    if isinstance(value, bool):
        raise ValueError("true/false is not a number")
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not a number") from None
    return value


def _flag(value: Any) -> Any:
    """true/false, also spelt as the strings "true"/"false" (a common near-miss)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return value


def _untagged(text: str) -> str:
    if PROMPT_TAG.search(text):
        raise ValueError("it holds a prompt tag such as <memory> (an injection attempt)")
    return text


Confidence = Annotated[
    float,
    BeforeValidator(_number),
    Field(ge=0, le=1, allow_inf_nan=False, strict=False),
]
Flag = Annotated[bool, BeforeValidator(_flag), Field(strict=True)]


# The scope gate (issues 20, 28). A proposed fact may say whose it is and how long it
# holds: ``scope`` "user" (true of the user in every project), "project" (this project's
# data, columns, metrics, decisions, results, conventions; "task", "notebook", "dataset"
# read as project) or "conversation" (this conversation only); ``durability`` "durable" or
# "one-time" (an instruction for this cell, answer or session). User facts are stored for
# the user, project facts in the active project (``memory/scopes.py``); a one-time or
# conversation-only fact is left out with its reason. A missing label (most models emit
# none, and DeerFlow's classic diff has none) counts as user-level and durable: the gate
# fails open on silence and closed on an explicit label. An unknown label counts as
# missing. ``scope: "project"`` reaches memory.json with the project's name; the others
# travel in the diff only.
USER_SCOPE, TASK_SCOPE, PROJECT_SCOPE = "user", "task", "project"
DURABLE, ONE_TIME = "durable", "one-time"
_SCOPES = {
    "user": USER_SCOPE,
    "user-level": USER_SCOPE,
    "user_level": USER_SCOPE,
    "global": USER_SCOPE,
    "personal": USER_SCOPE,
    "project": PROJECT_SCOPE,
    "task": PROJECT_SCOPE,
    "notebook": PROJECT_SCOPE,
    "dataset": PROJECT_SCOPE,
    "analysis": PROJECT_SCOPE,
    "local": PROJECT_SCOPE,
    "session": TASK_SCOPE,
    "thread": TASK_SCOPE,
    "conversation": TASK_SCOPE,
}
_DURABILITIES = {
    "durable": DURABLE,
    "persistent": DURABLE,
    "long-term": DURABLE,
    "long_term": DURABLE,
    "stable": DURABLE,
    "one-time": ONE_TIME,
    "one_time": ONE_TIME,
    "onetime": ONE_TIME,
    "once": ONE_TIME,
    "transient": ONE_TIME,
    "ephemeral": ONE_TIME,
    "temporary": ONE_TIME,
}


def _label(table: dict[str, str]) -> Callable[[Any], str | None]:
    def read(value: Any) -> str | None:
        if not isinstance(value, str):
            return None
        return table.get(value.strip().lower().replace(" ", "-"))

    return read


class FactProposal(BaseModel):
    """One ``newFacts`` item. Extra keys a model adds are ignored; ``scope`` and
    ``durability`` (the scope gate's labels, None when the model gave none) reach the
    updater through ``to_dict``, which never writes them to memory.json."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True, defer_build=True)

    content: str = Field(min_length=1)
    # DeerFlow stores a fact whose category is not text (``"category": 9``) as context.
    category: Annotated[str, BeforeValidator(lambda v: v if isinstance(v, str) else "context")] = (
        "context"
    )
    confidence: Confidence = 0.5
    scope: Annotated[str | None, BeforeValidator(_label(_SCOPES))] = None
    durability: Annotated[str | None, BeforeValidator(_label(_DURABILITIES))] = None

    def gate_reason(self) -> str | None:
        """Why the scope gate keeps this fact out of memory, or None when it may be stored."""
        if self.durability == ONE_TIME:
            return "a one-time instruction (durability: one-time): it stays in the conversation"
        if self.scope == TASK_SCOPE:
            return "about this conversation only (scope: conversation): it stays in it"
        return None

    @field_validator("content")
    @classmethod
    def _content(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("it is empty")
        return _untagged(value)

    @field_validator("category")
    @classmethod
    def _category(cls, value: str) -> str:
        value = value.strip().lower()
        return value if value in CATEGORIES else "context"

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)  # labels only when given


class SectionUpdate(BaseModel):
    """One ``user.*`` or ``history.*`` section of a diff."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True, defer_build=True)

    summary: str = ""
    should_update: Flag = Field(False, alias="shouldUpdate")

    @field_validator("summary")
    @classmethod
    def _summary(cls, value: str) -> str:
        return _untagged(value)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


class LeftOut(BaseModel):
    """A diff item that was not applied, and why (``item`` is its place: ``newFacts[2]``)."""

    model_config = ConfigDict(defer_build=True)

    item: str
    reason: str
    value: str = ""

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


class ExtractionDiff(BaseModel):
    """DeerFlow's classic diff, every item valid; what was dropped is in ``left_out``."""

    model_config = ConfigDict(populate_by_name=True, defer_build=True)

    user: dict[str, SectionUpdate] = Field(default_factory=dict)
    history: dict[str, SectionUpdate] = Field(default_factory=dict)
    new_facts: list[FactProposal] = Field(default_factory=list, alias="newFacts")
    facts_to_remove: list[str] = Field(default_factory=list, alias="factsToRemove")
    # The active project's context summary (an extra key DeerFlow's diff does not have).
    project_context: SectionUpdate | None = Field(None, alias="projectContext")
    left_out: list[LeftOut] = Field(default_factory=list, exclude=True)
    # The text of each malformed ``newFacts`` item ("" when it has none): a removal it may
    # have been meant to replace is not applied alone (``extraction.paired_removals``).
    malformed: list[str] = Field(default_factory=list, exclude=True)

    @classmethod
    def parse(cls, raw: Any) -> ExtractionDiff:
        """Check ``raw`` item by item; ``NotADiff`` only when it is no diff at all."""
        if not isinstance(raw, dict):
            raise NotADiff(f"the reply is {_kind(raw)}, not a JSON object")
        if raw and not any(key in raw for key in DIFF_KEYS):
            raise NotADiff(
                "the JSON object holds none of user, history, newFacts, factsToRemove "
                f"(its keys: {', '.join(map(str, list(raw)[:6]))})"
            )
        raw = encodable_deep(raw)  # a lone surrogate is text to keep (as U+FFFD), not a reason
        diff = cls()
        left = diff.left_out
        for group, names in SECTION_GROUPS:
            sections = raw.get(group)
            if sections is None:
                continue
            if not isinstance(sections, dict):
                left.append(_left(group, f"'{group}' must be an object", sections))
                continue
            clean: dict[str, SectionUpdate] = {}
            for name, section in sections.items():
                where = f"{group}.{name}"
                if name not in names:
                    left.append(_left(where, "not one of DeerFlow's sections", section))
                elif section is None:
                    continue
                elif not isinstance(section, dict):
                    left.append(_left(where, f"'{where}' must be an object", section))
                else:
                    try:
                        clean[name] = SectionUpdate.model_validate(section)
                    except ValidationError as exc:
                        left.append(_left(where, _reason(exc), section))
            setattr(diff, group, clean)
        facts = raw.get("newFacts")
        if facts is not None and not isinstance(facts, list):
            left.append(_left("newFacts", "'newFacts' must be a list", facts))
        else:
            for i, fact in enumerate(facts or []):
                where = f"newFacts[{i}]"
                if not isinstance(fact, dict):
                    left.append(_left(where, "a fact must be an object", fact))
                    diff.malformed.append(fact if isinstance(fact, str) else "")
                    continue
                try:
                    proposal = FactProposal.model_validate(fact)
                except ValidationError as exc:
                    left.append(_left(where, _reason(exc), fact.get("content", fact)))
                    text = fact.get("content")
                    diff.malformed.append(text if isinstance(text, str) else "")
                    continue
                gated = proposal.gate_reason()
                if gated:
                    left.append(_left(where, gated, proposal.content))
                else:
                    diff.new_facts.append(proposal)
        context = raw.get("projectContext")
        if isinstance(context, dict):
            try:
                diff.project_context = SectionUpdate.model_validate(context)
            except ValidationError as exc:
                left.append(_left("projectContext", _reason(exc), context))
        removals = raw.get("factsToRemove")
        if removals is not None and not isinstance(removals, list):
            left.append(_left("factsToRemove", "'factsToRemove' must be a list", removals))
        else:
            for i, handle in enumerate(removals or []):
                if isinstance(handle, str) and handle.strip():
                    if handle.strip() not in diff.facts_to_remove:
                        diff.facts_to_remove.append(handle.strip())
                else:
                    left.append(_left(f"factsToRemove[{i}]", "not a fact handle", handle))
        return diff

    def to_dict(self) -> dict[str, Any]:
        """The DeerFlow dict (what the updater applies and a pending change stores)."""
        out = {
            "user": {k: v.to_dict() for k, v in self.user.items()},
            "history": {k: v.to_dict() for k, v in self.history.items()},
            "newFacts": [f.to_dict() for f in self.new_facts],
            "factsToRemove": list(self.facts_to_remove),
        }
        if self.project_context is not None:
            out["projectContext"] = self.project_context.to_dict()
        return out


def _kind(value: Any) -> str:
    if value is None or value == "":
        return "empty"
    return {list: "a JSON list", str: "plain text"}.get(type(value), type(value).__name__)


def shorten(value: Any, limit: int = 80) -> str:
    """``value`` on one line, cut to ``limit`` characters: how a reason quotes it."""
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _left(item: str, reason: str, value: Any) -> LeftOut:
    return LeftOut(item=item, reason=reason, value=shorten(value))


def _reason(exc: ValidationError) -> str:
    """The first problem of a diff item, said plainly."""
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in error["loc"]) or "value"
    value = error.get("input")
    kind = error["type"]
    if kind == "missing":
        return f"it has no {field}"
    if field == "confidence":
        return f"confidence {shorten(repr(value), 30)} is not a number from 0 to 1"
    if field == "shouldUpdate":
        return f"shouldUpdate {shorten(repr(value), 30)} is not true or false"
    if kind == "string_type":
        return f"{field} {shorten(value, 30)} is not text"
    if kind == "string_too_short":
        return f"{field} is empty"
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"{field}: {message}"


# Bounds of the schema a server constrains a fold's reply to: with them a small model's
# diff both parses and ends within the fold's output cap (``model.max_output_tokens``).
SCHEMA_MAX_FACTS = 8
SCHEMA_FACT_CHARS = 200
SCHEMA_SUMMARY_CHARS = 400
# Confidences a constrained reply may give (grammar-based servers ignore a number's
# minimum and maximum, so the range is spelt out; the gate's threshold is 0.7).
SCHEMA_CONFIDENCES = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


def diff_json_schema(handles: Sequence[str] = ()) -> dict[str, Any]:
    """The extraction diff as a JSON schema, for servers that constrain output to one
    (``response_format`` json_schema): ``factsToRemove`` may name only ``handles``, the
    facts the prompt lists (none: it stays empty). ``ExtractionDiff.parse`` stays the
    guard behind it."""
    section = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "maxLength": SCHEMA_SUMMARY_CHARS},
            "shouldUpdate": {"type": "boolean"},
        },
        "required": ["summary", "shouldUpdate"],
        "additionalProperties": False,
    }
    fact = {
        "type": "object",
        "properties": {
            "content": {"type": "string", "minLength": 1, "maxLength": SCHEMA_FACT_CHARS},
            "category": {"enum": list(CATEGORIES)},
            "confidence": {"enum": list(SCHEMA_CONFIDENCES)},
            "scope": {"enum": [USER_SCOPE, TASK_SCOPE]},
            "durability": {"enum": [DURABLE, ONE_TIME]},
        },
        "required": ["content", "category", "confidence"],
        "additionalProperties": False,
    }
    groups = {
        group: {
            "type": "object",
            "properties": {name: section for name in names},
            "additionalProperties": False,
        }
        for group, names in SECTION_GROUPS
    }
    # Without ``items`` a grammar-based server allows any array, maxItems 0 or not.
    removals: dict[str, Any] = {"type": "array", "items": {"type": "string"}, "maxItems": 0}
    if handles:
        removals = {"type": "array", "items": {"enum": list(handles)}, "maxItems": len(handles)}
    return {
        "type": "object",
        "properties": {
            **groups,
            "newFacts": {"type": "array", "items": fact, "maxItems": SCHEMA_MAX_FACTS},
            "factsToRemove": removals,
        },
        "required": ["newFacts", "factsToRemove"],
        "additionalProperties": False,
    }
