"""Which messages of a thread reach memory extraction.

Only what the user said and the assistant's final replies: tool results and the
assistant's tool-calling steps are working notes, and sub-agent threads are the
agent talking to itself. Both would fill memory with facts about the agent.
"""

from __future__ import annotations

import re
from typing import Any

_UPLOADS = re.compile(r"<uploaded_files>[\s\S]*?</uploaded_files>\s*")


def filter_messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """User messages and final assistant replies, as ``{role, content}`` with text content."""
    kept = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if not isinstance(content, str):
            continue
        if role == "user":
            content = _UPLOADS.sub("", content).strip()
        elif role == "assistant" and not message.get("tool_calls"):
            content = content.strip()
        else:
            continue
        if content:
            kept.append({"role": role, "content": content})
    return kept


def is_foldable(messages: list[dict[str, Any]]) -> bool:
    """At least one user message and one assistant reply: otherwise there is nothing to learn."""
    roles = {m.get("role") for m in messages}
    return "user" in roles and "assistant" in roles
