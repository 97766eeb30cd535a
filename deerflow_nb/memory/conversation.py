"""The one door through which a front end journals a conversation (issue 38): the agent's
turns (``begin_turn`` … ``end_turn``, their streamed copies and summaries) and a plain list
of messages from a chat panel, an MCP client or a script (``add``, what
``Memory.add_messages`` does before it queues the fold).

Nothing outside ``memory/`` and ``storage/`` writes messages, turns or queue rows itself
(``tests/test_architecture.py``): the agent holds a ``Conversation``, not the journal. Thread
names and projects go through the one naming rule (``projects``) and the one resolver
(``Journal.thread_for``), so a name another project uses is another thread.
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


class Conversation:
    """Journal writes of a conversation, for any front end; reads stay on ``Journal``.

    A turn's writes are the journal's own methods, documented there once: ``begin_turn``
    (the user's message, in one transaction), ``keep_partial`` (a copy of a reply still
    streaming), ``end_turn`` (the rest, in one transaction), ``add_summary`` and ``close``
    (a worker thread's connection). ``thread_id`` and ``add`` name threads by the one rule.
    """

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self.begin_turn = journal.begin_turn
        self.keep_partial = journal.keep_partial
        self.end_turn = journal.end_turn
        self.add_summary = journal.add_summary
        self.close = journal.close

    def thread_id(self, thread: str, project: str | None) -> str:
        """The journal id of thread ``thread`` (normalised) in ``project`` (None: the
        default project)."""
        return self._journal.thread_for(thread_name(thread), project)

    def add(self, thread: str, messages: Iterable[dict[str, Any]], project: str | None) -> str:
        """Journal ``messages`` (user's and assistant's text) in ``project``'s thread
        ``thread``, all or none; the thread's id. The caller queues the fold."""
        kept = checked_messages(messages)
        project = project_name(project) if project else DEFAULT_PROJECT
        thread_id = self._journal.thread_for(thread_name(thread), project)
        self._journal.add_messages(thread_id, kept, project=project)
        return thread_id
