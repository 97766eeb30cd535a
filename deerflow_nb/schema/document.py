"""memory.json's typed shape and ``memory_problem``: why a document cannot be used, or None.

Facts are TypedDicts, not models: a 10,000-fact file is checked on every new revision.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

from .constants import SECTION_GROUPS
from .diff import shorten

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
                return f"'{group}.{name}' has summary {shorten(summary, 30)}, not text"
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
