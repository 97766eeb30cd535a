"""A conversation from outside the agent (a chat panel, an MCP client, a script), journaled
in its project's thread: what ``Memory.add_messages`` does before it queues the fold.

The thread name and the project go through the one naming rule (``projects``) and the one
resolver (``Journal.thread_for``), so a name another project uses is another thread; the
messages are kept as text, user's and assistant's only, as a fold reads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..projects import DEFAULT_PROJECT, project_name, thread_name
from ..storage.journal import Journal

ROLES = ("user", "assistant")


def checked_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, str]]:
    """Each message as ``{role, content}``; ValueError naming the first that is not a user
    or assistant message with text."""
    kept = []
    for number, message in enumerate(messages, 1):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role not in ROLES or not isinstance(content, str):
            raise ValueError(
                f"message {number} is not {{'role': 'user' | 'assistant', 'content': text}}"
            )
        kept.append({"role": role, "content": content})
    return kept


def journal_conversation(
    journal: Journal, thread: str, messages: Iterable[dict[str, Any]], project: str | None
) -> str:
    """Journal ``messages`` in ``project``'s thread ``thread`` (None: the default project),
    all or none; the thread's journal id."""
    kept = checked_messages(messages)
    project = project_name(project) if project else DEFAULT_PROJECT
    thread_id = journal.thread_for(thread_name(thread), project)
    journal.add_messages(thread_id, kept, project=project)
    return thread_id
