"""The lead agent's memory tools: ``search_memory``, ``recall`` and ``remember``.

Search and recall stay in the turn's project and the user's own facts: only the user
widens a search (``%memory … --all``), so an ``all_projects`` a model sends is ignored.
Search and recall show untrusted text inert; ``remember`` goes through
``Memory.add_fact`` and so the gate: a fact the user's message asked for and stated
("remember that I prefer polars") is the user's own, any other (a question such as "Do you
remember …?" asks for nothing) is stored as the model's suggestion (``addedBy:
"model"``), a turn may remember at most a handful, and none evicts a fact the user added.
Results fit a tool result's token budget.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from ..projects import fact_project
from ..schema.constants import CATEGORIES
from ..similarity import overlap
from ..tokens import count_tokens
from .tools import MAX_RESULT_TOKENS, MEMORY_TOOLS, TOOL_RECALL_K, TOOL_SEARCH_K, ToolError, ToolSet

MAX_K = 20
EXCERPT_CHARS = 280  # of one recalled message
REMEMBER_CONFIDENCE = 0.95  # the user asked for it in so many words
MAX_REMEMBER_CHARS = 500
# A sentence of the user's asking to keep something ...
_ASKED = re.compile(
    r"\b(?:remember|memori[sz]e|don'?t forget|do not forget|keep in mind|make a note|"
    r"note (?:that|down)|take note)\b",
    re.IGNORECASE,
)
# ... unless it asks what memory holds: "Do you remember …?", "Can you remember what I said
# about X?", "Remember when we chose polars?" ask for nothing to be kept.
_RECALLS = re.compile(
    r"\b(?:do|does|did|don'?t|didn'?t|can'?t|cannot)\s+(?:you|u|we)\s+(?:still\s+|even\s+)?"
    r"(?:remember|recall)\b"
    r"|\b(?:remember|recall)(?:ed)?\s+(?:what|which|who|whom|whose|how|when|where|why|whether|"
    r"if|anything|everything)\b|\bremember\s*\?",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")
# A fact is the user's when at least this share of its content words are the user's own.
STATED_SHARE = 0.5


def user_asked_to_remember(message: str | None, content: str) -> bool:
    """Whether the user's own message asked to keep ``content`` and stated it: one of its
    sentences asks to remember (a question about what memory holds does not), and most of
    the fact's content words are in the message. Else the fact is the model's suggestion:
    the user's word "remember" alone does not make the model's text theirs."""
    if not message:
        return False
    sentences = _SENTENCE.findall(message)
    if not any(_ASKED.search(s) and not _RECALLS.search(s) for s in sentences):
        return False
    said = " ".join(s for s in sentences if not _RECALLS.search(s))
    return overlap(content, said) >= STATED_SHARE


class MemoryTools(ToolSet):
    """``search_memory``, ``recall`` and ``remember``, bound to one ``Memory`` and the
    turn's thread. Only the lead agent gets them: sub-agents take
    ``NotebookTools.read_only()``, which has none.

    Facts and journal text are untrusted (an imported memory.json or an old reply can
    hold anything): each fact or excerpt becomes one line with ``&``, ``<`` and ``>`` as
    entities and no control, bidi or zero-width characters (``block.escape``), so
    nothing in a result can forge or close a tag of the prompt.
    """

    names = MEMORY_TOOLS

    def __init__(
        self,
        memory: Any,
        thread: str,
        *,
        current_turn: Callable[[], str | None] | None = None,
        user_message: str | None = None,
        project: str | None = None,
    ) -> None:
        self.memory = memory
        self.thread = thread
        self.project = project  # the turn's project: searched by default, remembered into
        self._current_turn = current_turn  # its messages are never "the past"
        self._user_message = user_message  # whether the user asked to remember
        self._own_turn = f"tools-{uuid.uuid4().hex[:12]}"  # one ToolSet serves one turn

    def search_memory(
        self, query: str = "", k: int = TOOL_SEARCH_K, all_projects: object = None
    ) -> str:
        """The user's and this project's facts; ``all_projects`` (no longer offered) is
        accepted from an older prompt and ignored: only the user widens a search."""
        from ..memory import escape_for_block as escape

        query = _text_argument(query, "query", required=False)
        k = _count(k, TOOL_SEARCH_K)
        scope: dict[str, Any] = {"project": self.project}
        # What this project sees, in confidence order (an empty query lists them).
        seen = self.memory.search("", k=1 << 30, relevant_only=False, **scope)
        total = len(seen)
        if not query.strip():
            hits = [fact for fact, _ in seen[:k]]
            if not hits:
                return "Memory holds no facts about the user yet."
            head = (
                f"The {len(hits)} most confident of {total} facts "
                "(id | category | confidence | fact):"
            )
            return fit(head, [fact_line(f) for f in hits])
        hits = [fact for fact, _ in self.memory.search(query, k=k, **scope)]
        if hits:
            head = (
                f'{len(hits)} of {total} remembered facts match "{escape(query)}", best first '
                "(id | category | confidence | fact):"
            )
            return fit(head, [fact_line(f) for f in hits])
        if not total:
            return "Memory holds no facts about the user yet."
        miss = f'Nothing stored matches "{escape(query)}" ({total} facts searched).'
        nearest = [fact for fact, _ in self.memory.search(query, k=1, relevant_only=False, **scope)]
        if not nearest:
            return miss
        return fit(f"{miss} Nearest miss, not a match:", [fact_line(nearest[0])])

    def recall(
        self,
        query: str,
        thread: str | None = None,
        k: int = TOOL_RECALL_K,
        all_projects: object = None,
    ) -> str:
        """This project's earlier conversations; ``all_projects`` is ignored (see
        ``search_memory``), and a ``thread`` names this project's thread of that name."""
        from ..memory import escape_for_block as escape

        query = _text_argument(query, "query")
        if thread is not None and not isinstance(thread, str):
            raise ToolError("thread must be a thread's name, or left out for every thread")
        thread = thread.strip() or None if isinstance(thread, str) else None
        k = _count(k, TOOL_RECALL_K)
        skip = self._this_turn()
        hits = self.memory.recall(query, k=k + len(skip), thread=thread, project=self.project)
        hits = [h for h in hits if (h["thread"], h["seq"]) not in skip][:k]
        where = f" in thread {escape(thread)}" if thread else ""
        if not thread and self.project:
            where = f" of project {escape(self.project)}"
        if not hits:
            miss = f'Nothing stored matches "{escape(query)}" in earlier conversations{where}.'
            nearest = self.memory.recall(
                query,
                k=1 + len(skip),
                thread=thread,
                project=self.project,
                relevant_only=False,
            )
            nearest = [h for h in nearest if (h["thread"], h["seq"]) not in skip][:1]
            if not nearest:
                return miss
            miss += " Nearest miss, not a match:"
            return fit(miss, [_message_line(nearest[0], query)])
        head = (
            f'{len(hits)} earlier messages{where} match "{escape(query)}", best first '
            "(date | thread | message number and speaker: excerpt):"
        )
        return fit(head, [_message_line(hit, query) for hit in hits])

    def remember(self, content: str, category: str = "context", scope: str | None = None) -> str:
        from ..projects import looks_like_project

        content = " ".join(_text_argument(content, "content").split())
        if len(content) > MAX_REMEMBER_CHARS:
            raise ToolError(
                f"a fact is one short sentence (at most {MAX_REMEMBER_CHARS} characters); "
                "split it into several remember calls"
            )
        if category not in CATEGORIES:
            raise ToolError(f"category must be one of: {', '.join(CATEGORIES)}")
        if scope not in (None, "user", "project"):
            raise ToolError("scope must be 'user' (every project) or 'project' (this one)")
        if scope is None:
            scope = "project" if self.project and looks_like_project(content) else "user"
        before = {f.get("id") for f in self.memory.data.get("facts", [])}
        asked = user_asked_to_remember(self._user_message, content)
        turn = (self._current_turn() if self._current_turn else None) or self._own_turn
        try:
            fact = self.memory.add_fact(
                content,
                category,
                REMEMBER_CONFIDENCE,
                source=self.thread,
                origin="user" if asked else "model",
                turn=turn,
                project=(self.project or "default") if scope == "project" else None,
            )
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        if fact.get("id") is None:
            waits = f"pending change {fact['pending_id']}" if fact.get("pending_id") else ""
            return f"Not stored yet: {escape_line(fact.get('held', ''))}" + (
                f"; it waits for the user's approval as {waits}" if waits else ""
            )
        line = fact_line(fact).removeprefix("- ")
        if fact.get("id") in before:
            return f"Already remembered, now confirmed: {line}"
        if not asked:
            return (
                f"Remembered: {line} (stored as your suggestion: the user's message did not ask "
                "to keep this in their own words; "
                "they see it marked in %memory facts and can confirm or forget it)"
            )
        return f"Remembered: {line} (stored now; the user can see it with %memory facts)"

    def _this_turn(self) -> set[tuple[str, int]]:
        """(thread, seq) of the current turn's messages: the question being asked is not
        something said before."""
        turn = self._current_turn() if self._current_turn is not None else None
        if not turn:
            return set()
        return self.memory.journal.turn_places(turn)


def escape_line(text: str) -> str:
    from ..memory import escape_for_block as escape

    return escape(text)


def fit(head: str, lines: list[str]) -> str:
    """``head`` and as many whole ``lines`` as fit in a tool result, then how many did not."""
    budget = MAX_RESULT_TOKENS - count_tokens(head) - 20
    kept: list[str] = []
    for line in lines:
        budget -= count_tokens(line) + 1
        if budget < 0:
            break
        kept.append(line)
    if len(kept) < len(lines):
        kept.append(
            f"({len(lines) - len(kept)} more not shown: ask for fewer, or narrow the query)"
        )
    return "\n".join([head, *kept])


def _message_line(hit: dict[str, Any], query: str) -> str:
    """One recall hit: date, thread, message number and speaker, excerpt."""
    from ..memory import escape_for_block as escape

    stamp = str(hit.get("created_at") or "")[:16].replace("T", " ") or "undated"
    text = escape(excerpt(str(hit.get("content") or ""), query))
    echoes = len(hit.get("echoes") or ())
    again = f" (said back or asked about {echoes} more times)" if echoes else ""
    return (
        f"- {escape(stamp)} | {escape(str(hit['thread']))} | "
        f"#{hit['seq']} {escape(str(hit['role']))}: {text}{again}"
    )


def fact_line(fact: dict[str, Any]) -> str:
    """One fact as every memory tool lists it (the MCP server's too), escaped:
    ``- id | category | confidence | text`` and its project when it has one."""
    from ..memory import escape_for_block as escape

    try:
        confidence = float(fact.get("confidence", 0))
    except (TypeError, ValueError):
        confidence = 0.0
    project = fact_project(fact)
    where = f" (project {escape(str(project))})" if project else ""
    return (
        f"- {escape(str(fact.get('id', '?')))} | {escape(str(fact.get('category', 'context')))}"
        f" | {confidence:.2f} | {escape(str(fact.get('content', '')))}{where}"
    )


def excerpt(text: str, query: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` on one line, or at most ``limit`` characters of it around the first word
    of ``query`` it contains, with ``…`` where it was cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    low = text.lower()
    found = [at for word in re.findall(r"[^\W_]{3,}", query.lower()) if (at := low.find(word)) >= 0]
    start = max(0, min(found) - limit // 4) if found else 0
    start = min(start, len(text) - limit)
    if start > 0 and (space := text.find(" ", start, start + 20)) >= 0:
        start = space + 1
    end = start + limit
    if end < len(text) and (space := text.rfind(" ", end - 20, end)) > start:
        end = space  # a whole word last
    # "...", not "…": escape() would turn the one into the other anyway (NFKC).
    return ("..." if start else "") + text[start:end].rstrip() + ("..." if end < len(text) else "")


def _text_argument(value: Any, name: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ToolError(f"'{name}' must be a non-empty string")
    return value


def _count(value: Any, default: int) -> int:
    """A result count the model asked for, within 1..MAX_K (its default when not a number)."""
    try:
        return max(1, min(int(value), MAX_K))
    except (TypeError, ValueError):
        return default
