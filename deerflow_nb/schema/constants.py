"""memory.json's fixed names (sections, categories, prompt tags) and who added a fact.

No pydantic here: modules on light paths (the agent's tools, the ``%memory`` grammar) take
their constants from this module instead of spelling them out again.
"""

from __future__ import annotations

import re
from typing import Any

SCHEMA_VERSION = "1.0"
USER_SECTIONS = ("workContext", "personalContext", "topOfMind")
HISTORY_SECTIONS = ("recentMonths", "earlierContext", "longTermBackground")
SECTION_GROUPS = (("user", USER_SECTIONS), ("history", HISTORY_SECTIONS))
# Each section's name for people (views, review items): never the internal key.
SECTION_LABELS = {
    ("user", "workContext"): "Work context",
    ("user", "personalContext"): "Personal context",
    ("user", "topOfMind"): "Top of mind",
    ("history", "recentMonths"): "Recent months",
    ("history", "earlierContext"): "Earlier context",
    ("history", "longTermBackground"): "Long-term background",
}


def section_label(key: str) -> str:
    """A section's dotted key (``user.workContext``, an event's ``section``) for people."""
    group, _, name = key.partition(".")
    if group == "projects" and name:
        return f"Project {name}'s summary"
    return SECTION_LABELS.get((group, name), key)


CATEGORIES = ("preference", "knowledge", "context", "behavior", "goal", "correction")
DIFF_KEYS = ("user", "history", "newFacts", "factsToRemove")

# An opening or closing <memory> tag, spaces allowed inside the brackets: manual text has it
# neutralised (the injection block's own escaping also holds).
MEMORY_TAG = re.compile(r"<\s*(/?)\s*(memory)\s*>", re.IGNORECASE)
# Tags of our prompts and of common chat templates: model text holding one is an attempt to
# close or forge a block, not a fact. Generic angle brackets ("List<String>") are fine. The
# square-bracket forms are what the prompt boundary (``untrusted.prompt_text``) writes for
# a tag quoted in a prompt: a reply copying one back is the same attempt.
PROMPT_TAG_NAMES = (
    r"(?:memory|current_memory|conversation\w*|consolidate_facts|system|user|assistant|tool|"
    r"developer|instructions?|uploaded_files|im_start|im_end)"
)
PROMPT_TAG = re.compile(
    rf"<\s*/?\s*{PROMPT_TAG_NAMES}\b[^<>]*>|<\|[^<>|]{{1,40}}\|>"
    rf"|\[\s*/?\s*{PROMPT_TAG_NAMES}\s*\]|\[\|[^\[\]|]{{1,40}}\|\]",
    re.IGNORECASE,
)

# Whose a fact is comes from the change set that added it (``schema/changes.py``'s origin),
# never from its text or its source: the user's own command (``%memory add``, the panel,
# the inspector, ``Memory.add_fact``, a ``remember`` their message asked for and stated)
# stores ``addedBy: "user"``, and no fold removes or evicts such a fact without review.
ADDED_BY_USER = "user"
# Facts the model chose to store (its ``remember`` when no user message asked) carry
# ``addedBy: "model"``: its suggestion, shown as such, which later folds may remove. It
# becomes the user's own when the user states or edits it.
ADDED_BY_MODEL = "model"
# Facts the memory model learned from a conversation (a fold, or upkeep) carry
# ``addedBy: "fold"``, so a thread's name can never make them pass for the user's.
ADDED_BY_FOLD = "fold"
SUGGESTION_MARK = "(suggested by the model)"  # how %memory, the panel and the inspector say so
# The consolidation prompt's tag (memory/updates/aging.py); the offline model answers it
# with merges.
CONSOLIDATE_TAG = "consolidate_facts"
# Only a fact with no ``addedBy`` (a DeerFlow memory.json, or one written before it was
# stamped) is read by its source: DeerFlow marks a hand-added fact ``source: "manual"``.
LEGACY_USER_SOURCES = frozenset({"manual", "remember"})


def is_user_fact(fact: dict[str, Any]) -> bool:
    """Whether the user added ``fact`` themselves (so no fold may drop it unreviewed)."""
    added_by = fact.get("addedBy")
    if added_by is not None:
        return added_by == ADDED_BY_USER
    return fact.get("source") in LEGACY_USER_SOURCES


def is_model_suggestion(fact: dict[str, Any]) -> bool:
    """Whether the model stored ``fact`` on its own (no user message asked for it)."""
    return fact.get("addedBy") == ADDED_BY_MODEL
