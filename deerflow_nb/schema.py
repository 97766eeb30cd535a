"""The typed schema: DeerFlow's memory.json, the extraction diff, and config.yaml's settings.

pydantic v2 models, with DeerFlow's field names as aliases (``newFacts``, ``factsToRemove``,
``shouldUpdate``, ``createdAt`` …). Three checks are built on them:

- ``ExtractionDiff.parse(raw)``: a model's diff, checked **per item**. An invalid fact,
  removal or section is left out with a reason (``LeftOut``) and the valid rest is kept;
  only a reply that is not a diff at all raises ``NotADiff``.
- ``memory_problem(data)``: why a memory.json document cannot be used, in one line, or None.
- ``check_settings_section(name, raw, source)``: one config.yaml section, validated against
  ``Field(ge=…, le=…)`` bounds, as a dict of values, or ``ConfigError`` in one line.

This module imports pydantic (tens of milliseconds), so nothing on the ``%load_ext`` path
imports it: ``config`` loads it only when a config.yaml exists, the memory package when it
is first used.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from .scrub import encodable_deep

SCHEMA_VERSION = "1.0"
USER_SECTIONS = ("workContext", "personalContext", "topOfMind")
HISTORY_SECTIONS = ("recentMonths", "earlierContext", "longTermBackground")
SECTION_GROUPS = (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS))
CATEGORIES = ("preference", "knowledge", "context", "behavior", "goal", "correction")
DIFF_KEYS = ("user", "history", "newFacts", "factsToRemove")

# An opening or closing <memory> tag, spaces allowed inside the brackets: manual text has it
# neutralised (the injection block's own escaping also holds).
MEMORY_TAG = re.compile(r"<\s*(/?)\s*(memory)\s*>", re.IGNORECASE)
# Tags of our prompts and of common chat templates: model text holding one is an attempt to
# close or forge a block, not a fact. Generic angle brackets ("List<String>") are fine.
PROMPT_TAG = re.compile(
    r"<\s*/?\s*(?:memory|current_memory|conversation|conversation_to_summarize|system|user|"
    r"assistant|tool|instructions?|uploaded_files|im_start|im_end)\b[^<>]*>|<\|[^<>|]{1,40}\|>",
    re.IGNORECASE,
)

# Facts the user stated by hand (``%memory add``, the inspector, a ``remember`` tool) carry
# ``addedBy: "user"``; older ones are recognised by their source. A fold never removes or
# evicts one without review.
ADDED_BY_USER = "user"
# The consolidation prompt's tag (memory/aging.py); the offline model answers it with merges.
CONSOLIDATE_TAG = "consolidate_facts"
USER_SOURCES = frozenset({"manual", "remember"})


def is_user_fact(fact: dict[str, Any]) -> bool:
    """Whether the user added ``fact`` themselves (so no fold may drop it unreviewed)."""
    return fact.get("addedBy") == ADDED_BY_USER or fact.get("source") in USER_SOURCES


class NotADiff(ValueError):
    """The value is not an extraction diff at all (no object, none of DeerFlow's keys)."""


# -- the extraction diff ------------------------------------------------------------------


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


# The scope gate (issue 20). A proposed fact may say whose it is and how long it holds:
# ``scope`` "user" (true of the user beyond this conversation) or "task" (this notebook,
# dataset or task only); ``durability`` "durable" or "one-time" (an instruction for this
# cell, answer or session). Only durable, user-level facts are stored; a fact labelled
# task or one-time is left out with its reason. A missing label (most models emit none,
# and DeerFlow's classic diff has none) counts as user-level and durable: the gate fails
# open on silence and closed on an explicit label. An unknown label counts as missing.
# The labels travel in the diff only; memory.json never holds them.
USER_SCOPE, TASK_SCOPE = "user", "task"
DURABLE, ONE_TIME = "durable", "one-time"
_SCOPES = {
    "user": USER_SCOPE,
    "user-level": USER_SCOPE,
    "user_level": USER_SCOPE,
    "global": USER_SCOPE,
    "personal": USER_SCOPE,
    "task": TASK_SCOPE,
    "notebook": TASK_SCOPE,
    "session": TASK_SCOPE,
    "thread": TASK_SCOPE,
    "conversation": TASK_SCOPE,
    "project": TASK_SCOPE,
    "local": TASK_SCOPE,
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
    category: Annotated[str, BeforeValidator(lambda v: "context" if v is None else v)] = "context"
    confidence: Confidence = 0.5
    scope: Annotated[str | None, BeforeValidator(_label(_SCOPES))] = None
    durability: Annotated[str | None, BeforeValidator(_label(_DURABILITIES))] = None

    def gate_reason(self) -> str | None:
        """Why the scope gate keeps this fact out of memory, or None when it may be stored."""
        if self.durability == ONE_TIME:
            return "a one-time instruction (durability: one-time): it stays in the conversation"
        if self.scope == TASK_SCOPE:
            return "about this notebook or task only (scope: task): it stays in the conversation"
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
    left_out: list[LeftOut] = Field(default_factory=list, exclude=True)

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
                    continue
                try:
                    proposal = FactProposal.model_validate(fact)
                except ValidationError as exc:
                    left.append(_left(where, _reason(exc), fact.get("content", fact)))
                    continue
                gated = proposal.gate_reason()
                if gated:
                    left.append(_left(where, gated, proposal.content))
                else:
                    diff.new_facts.append(proposal)
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
        return {
            "user": {k: v.to_dict() for k, v in self.user.items()},
            "history": {k: v.to_dict() for k, v in self.history.items()},
            "newFacts": [f.to_dict() for f in self.new_facts],
            "factsToRemove": list(self.facts_to_remove),
        }


def _kind(value: Any) -> str:
    if value is None or value == "":
        return "empty"
    return {list: "a JSON list", str: "plain text"}.get(type(value), type(value).__name__)


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _left(item: str, reason: str, value: Any) -> LeftOut:
    return LeftOut(item=item, reason=reason, value=_short(value))


def _reason(exc: ValidationError) -> str:
    """The first problem of a diff item, said plainly."""
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in error["loc"]) or "value"
    value = error.get("input")
    kind = error["type"]
    if kind == "missing":
        return f"it has no {field}"
    if field == "confidence":
        return f"confidence {_short(repr(value), 30)} is not a number from 0 to 1"
    if field == "shouldUpdate":
        return f"shouldUpdate {_short(repr(value), 30)} is not true or false"
    if kind == "string_type":
        return f"{field} {_short(value, 30)} is not text"
    if kind == "string_too_short":
        return f"{field} is empty"
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"{field}: {message}"


# -- memory.json ---------------------------------------------------------------------------

StrictFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
StrictInt = Annotated[int, Field(strict=True)]


@with_config(ConfigDict(extra="allow"))
class FactRecord(TypedDict):
    """One fact as stored. Extra fields (``updatedAt``, ``confirmations``, ``addedBy``) are
    allowed, never required: a DeerFlow memory.json reads as is and ours reads in DeerFlow.
    (A TypedDict, not a model: a 10,000-fact file is checked on every new revision.)"""

    id: Annotated[str, Field(strict=True, min_length=1)]
    content: Annotated[str, Field(strict=True)]
    category: NotRequired[Any]
    confidence: NotRequired[StrictFloat]
    createdAt: NotRequired[Any]
    source: NotRequired[Any]
    confirmations: NotRequired[StrictInt]
    addedBy: NotRequired[Any]


@with_config(ConfigDict(extra="allow"))
class MemoryDocument(TypedDict):
    """memory.json: ``{version, lastUpdated, user, history, facts}``; unknown keys kept.
    Each section is ``{summary, updatedAt}`` (checked by ``memory_problem``)."""

    version: NotRequired[Any]
    lastUpdated: NotRequired[Any]
    user: NotRequired[dict[str, Any]]
    history: NotRequired[dict[str, Any]]
    facts: NotRequired[list[FactRecord]]


_DOCUMENT: TypeAdapter[MemoryDocument] | None = None


_FACT_KINDS = {"confidence": "a number", "confirmations": "a whole number"}


def memory_problem(data: Any) -> str | None:
    """Why ``data`` is not a usable memory document (one line), or None when it is."""
    global _DOCUMENT
    if not isinstance(data, dict):
        return "the top level is not a JSON object"
    if _DOCUMENT is None:
        _DOCUMENT = TypeAdapter(MemoryDocument)
    try:
        _DOCUMENT.validate_python(data)
    except ValidationError as exc:
        return _document_problem(exc, data)
    for group, _ in SECTION_GROUPS:
        for name, section in (data.get(group) or {}).items():
            summary = section.get("summary") if isinstance(section, dict) else None
            if summary is not None and not isinstance(summary, str):
                return f"'{group}.{name}' has summary {_short(summary, 30)}, not text"
    seen: set[str] = set()
    for i, fact in enumerate(data.get("facts") or ()):
        fact_id = fact["id"]
        if not fact_id.strip():
            return f"facts[{i}] has no 'id' (every fact needs a unique text id)"
        if fact_id in seen:
            return f"facts[{i}] repeats the id {fact_id!r} (every fact needs a unique text id)"
        seen.add(fact_id)
    return None


def _document_problem(exc: ValidationError, data: dict[str, Any]) -> str:
    error = exc.errors(include_url=False)[0]
    loc = error["loc"]
    if not loc:  # the model validator's own message
        return str(error.get("msg", "")).removeprefix("Value error, ")
    head = loc[0]
    if head in ("user", "history"):
        return f"'{head}' is not an object"
    if head == "facts":
        if len(loc) == 1:
            return "'facts' is not a list"
        i, key = loc[1], loc[2] if len(loc) > 2 else None
        if key == "id":
            return f"facts[{i}] has no 'id' (every fact needs a unique text id)"
        if key in _FACT_KINDS:
            value = data["facts"][i].get(key)
            return f"facts[{i}] has {key} {value!r}, not {_FACT_KINDS[key]}"
        return f"facts[{i}] is not a fact object with a text 'content'"
    return f"'{head}': {error.get('msg', 'invalid')}"


# -- config.yaml --------------------------------------------------------------------------


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


Seconds = Annotated[float, Field(allow_inf_nan=False)]


class ContextSizeSettings(_Section):
    """DeerFlow's ``{type, value}`` size: tokens, messages, or a fraction of the window."""

    type: Literal["tokens", "messages", "fraction"] = "messages"
    value: Annotated[float, Field(allow_inf_nan=False)] = 20

    @model_validator(mode="after")
    def _value_fits_type(self) -> ContextSizeSettings:
        if self.type == "fraction" and not 0 < self.value <= 1:
            raise ValueError(
                "is a fraction of the window, so its value must be above 0 and at most 1, "
                f"got {self.value!r}"
            )
        if self.type != "fraction" and self.value < 0:
            raise ValueError(
                f"counts {self.type}, so its value must be at least 0, got {self.value!r}"
            )
        return self


class ModelSettings(_Section):
    name: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    send_openai_key_to_base_url: bool = False
    max_input_tokens: int = Field(128_000, ge=1)
    timeout_seconds: Seconds = Field(60.0, ge=0.001)
    max_retries: int = Field(3, ge=0)


class MemorySettings(_Section):
    enabled: bool = True
    debounce_seconds: Seconds = Field(30.0, ge=0, le=86_400)  # more overflows the wait
    model_name: str | None = None
    max_facts: int = Field(100, ge=1)
    fact_confidence_threshold: Annotated[float, Field(allow_inf_nan=False)] = Field(0.7, ge=0, le=1)
    injection_enabled: bool = True
    max_injection_tokens: int = Field(2000, ge=1)
    embeddings: str | None = None
    review: bool = False
    staleness_days: Annotated[float, Field(allow_inf_nan=False)] = Field(180.0, ge=1)
    eviction: Literal["blend", "confidence"] = "blend"


def _listify(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


class SummarizationSettings(_Section):
    enabled: bool = True
    model_name: str | None = None
    trigger: Annotated[list[ContextSizeSettings], BeforeValidator(_listify)] = Field(
        default_factory=lambda: [ContextSizeSettings(type="fraction", value=0.8)]
    )
    keep: ContextSizeSettings = Field(
        default_factory=lambda: ContextSizeSettings(type="messages", value=20)
    )
    trim_tokens_to_summarize: int = Field(4000, ge=1)
    summary_prompt: str | None = None


class SubagentsSettings(_Section):
    enabled: bool = True
    max_concurrent: int = Field(3, ge=1)
    max_per_turn: int = Field(6, ge=1)
    max_turns: int = Field(8, ge=1)
    timeout_seconds: Seconds = Field(120.0, ge=0.001)


class AgentSettings(_Section):
    max_turns: int = Field(12, ge=1)
    allow_code_execution: bool = False


SETTINGS_SECTIONS: dict[str, type[_Section]] = {
    "model": ModelSettings,
    "memory": MemorySettings,
    "summarization": SummarizationSettings,
    "subagents": SubagentsSettings,
    "agent": AgentSettings,
}


def check_settings_section(section: str, raw: Any, source: Path | str) -> dict[str, Any]:
    """One config.yaml section as plain values (nested sizes as dicts), or ConfigError."""
    from .config import ConfigError

    model = SETTINGS_SECTIONS[section]
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: '{section}' must be a mapping, got {raw!r}")
    try:
        checked = model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_settings_problem(exc, section, model)}") from None
    return {name: getattr(checked, name) for name in raw}


_TYPE_WORDS = {
    "bool_type": "true or false",
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "list_type": "a list",
}


def _settings_problem(exc: ValidationError, section: str, model: type[BaseModel]) -> str:
    error = exc.errors(include_url=False)[0]
    loc = [section, *error["loc"]]
    # A union (str | None) reports its member; the key is the path without the member name.
    loc = [p for p in loc if p not in ("str", "int", "float", "bool", "list[ContextSizeSettings]")]
    key = ".".join(str(p) for p in loc if not isinstance(p, int))
    for i, part in enumerate(loc):
        if isinstance(part, int):
            key = (
                ".".join(str(p) for p in loc[:i])
                + f"[{part}]"
                + "".join(f".{p}" for p in loc[i + 1 :])
            )
            break
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        owner = model if len(loc) == 2 else ContextSizeSettings
        known = ", ".join(sorted(owner.model_fields))
        return f"unknown key '{key}' (known: {known})"
    if kind == "finite_number":
        return f"'{key}' must be a finite number, got {value!r}"
    if kind in ("greater_than_equal", "less_than_equal"):
        low, high = _bounds(model, loc)
        shown = float(value) if isinstance(value, float) or _is_float_field(model, loc) else value
        if high is not None:
            return f"'{key}' must be from {low:g} to {high:g}, got {shown!r}"
        return f"'{key}' must be at least {low:g}, got {shown!r}"
    if kind == "literal_error":
        return f"'{key}' must be one of {ctx.get('expected', '')}, got {value!r}"
    if kind == "value_error":
        return f"'{key}' " + str(error.get("msg", "")).removeprefix("Value error, ")
    if kind in _TYPE_WORDS:
        return f"'{key}' must be {_TYPE_WORDS[kind]}, got {value!r}"
    return f"'{key}': {error.get('msg')} (got {value!r})"


def _field_info(model: type[BaseModel], loc: list[Any]) -> Any:
    if len(loc) != 2:
        return None
    return model.model_fields.get(str(loc[1]))


def _bounds(model: type[BaseModel], loc: list[Any]) -> tuple[float | None, float | None]:
    info = _field_info(model, loc)
    low = high = None
    for meta in getattr(info, "metadata", []):
        low = getattr(meta, "ge", low)
        high = getattr(meta, "le", high)
    return low, high


def _is_float_field(model: type[BaseModel], loc: list[Any]) -> bool:
    info = _field_info(model, loc)
    return info is not None and info.annotation is float
