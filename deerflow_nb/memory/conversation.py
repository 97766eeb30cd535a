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

from collections.abc import Iterable, Sequence
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
    """Journal writes of a conversation, for any front end; reads stay on ``Journal``."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

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

    def begin_turn(
        self,
        thread_id: str,
        user_message: dict[str, Any],
        *,
        model: str,
        kind: str = "lead",
        parent_id: str | None = None,
        title: str | None = None,
        private: bool = False,
        project: str | None = None,
    ) -> str:
        """Open a turn with the user's message, in one transaction; the turn's id."""
        return self._journal.begin_turn(
            thread_id,
            user_message,
            model=model,
            kind=kind,
            parent_id=parent_id,
            title=title,
            private=private,
            project=project,
        )

    def keep_partial(self, turn_id: str, seq: int | None, text: str) -> int:
        """Copy a reply still streaming into the journal (``Journal.keep_partial``)."""
        return self._journal.keep_partial(turn_id, seq, text)

    def end_turn(
        self,
        turn_id: str,
        *,
        status: str,
        messages: Sequence[dict[str, Any]] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
        facts_injected: int = 0,
        error: str | None = None,
        replaces: int | None = None,
    ) -> None:
        """Close the turn with its remaining messages, in one transaction."""
        self._journal.end_turn(
            turn_id,
            status=status,
            messages=messages,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            facts_injected=facts_injected,
            error=error,
            replaces=replaces,
        )

    def add_summary(self, thread_id: str, covers_until_seq: int, text: str, *, model: str) -> None:
        """Keep a summary of the thread's messages through ``covers_until_seq``."""
        self._journal.add_summary(thread_id, covers_until_seq, text, model=model)

    def close(self) -> None:
        """Close the calling thread's journal connection (a sub-agent's worker thread)."""
        self._journal.close()
