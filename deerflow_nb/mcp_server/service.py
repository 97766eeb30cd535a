"""The MCP server's tools and resources, free of any MCP SDK: memory for other agents.

Each tool is a call on the public Memory API. ``search_memory``, ``recall`` and ``remember``
are the agent's own (``agent.memory_tools.MemoryTools``), so a client gets the same escaped,
inert text, "nothing matches" when nothing does, and the same walls: one project plus the
user's own facts, never every project. ``remember`` is the model's (``addedBy: "model"``),
capped per client session as one turn is (the gate counts a session as one turn);
``forget`` is the model's removal, waiting for the user's approval unless
``memory.review_outside_forget`` is off; ``add_messages`` is ``Memory.add_messages``.
``sdk.py`` serves this through whichever MCP major is installed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from ..agent.memory_tools import MemoryTools, fact_line, fit
from ..agent.tools import MAX_RESULT_TOKENS, MEMORY_TOOLS, ToolError, tool_specs
from ..home import HomeError
from ..memory import MemoryFileError
from ..projects import check_project_name, project_name, thread_name
from ..schema.constants import CATEGORIES, USER_SECTIONS
from ..tokens import truncate_to_tokens

if TYPE_CHECKING:
    from ..memory import Memory

SOURCE = "mcp"  # the thread a client's remembered facts name as their source
LIST_LIMIT = 50  # facts list_facts shows by default
MAX_MESSAGES = 500  # one add_messages call
PROFILE_URI = "memory://profile"
PROJECT_PREFIX = "memory://projects/"
TOOLS = (*MEMORY_TOOLS, "list_facts", "forget", "add_messages")
_SECTION_NAMES = {
    "workContext": "Work context",
    "personalContext": "Personal context",
    "topOfMind": "Top of mind",
}
_PROJECT = {
    "type": "string",
    "description": "which project's memory (default: the server's project); the user's own "
    "facts are always included, other projects never",
}
_OWN_SPECS: dict[str, dict[str, Any]] = {
    "list_facts": {
        "description": "List the facts remembered about the user and this project, most "
        "confident first: id, category, confidence and text (ids are what forget takes).",
        "parameters": {
            "type": "object",
            "properties": {
                "category": {"type": "string", "enum": list(CATEGORIES)},
                "offset": {"type": "integer", "description": "skip this many (default 0)"},
                "limit": {"type": "integer", "description": f"at most (default {LIST_LIMIT})"},
            },
        },
    },
    "forget": {
        "description": "Ask to remove one fact by its id (from list_facts or search_memory). "
        "The removal waits for the user's approval unless their configuration says otherwise.",
        "parameters": {
            "type": "object",
            "properties": {"fact_id": {"type": "string", "description": "the fact's id"}},
            "required": ["fact_id"],
        },
    },
    "add_messages": {
        "description": "Journal your conversation with the user in one of this project's "
        "threads, so memory learns from it (folded into facts after a short wait).",
        "parameters": {
            "type": "object",
            "properties": {
                "thread": {"type": "string", "description": "the conversation's name"},
                "messages": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "role": {"type": "string", "enum": ["user", "assistant"]},
                            "content": {"type": "string"},
                        },
                        "required": ["role", "content"],
                    },
                },
            },
            "required": ["thread", "messages"],
        },
    },
}


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a client lists it: name, description, JSON schema of its arguments."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ResourceSpec:
    """A resource (or, with ``{project}`` in the uri, a template) a client can read."""

    uri: str
    name: str
    description: str


def tool_list() -> list[ToolSpec]:
    """Every tool, the agent's three with the agent's own descriptions, each with ``project``."""
    specs = {s["function"]["name"]: s["function"] for s in tool_specs(MEMORY_TOOLS)}
    specs.update(_OWN_SPECS)
    out = []
    for name in TOOLS:
        schema = dict(specs[name]["parameters"])
        schema["properties"] = {**schema["properties"], "project": _PROJECT}
        out.append(ToolSpec(name, specs[name]["description"], schema))
    return out


def project_uri(project: str) -> str:
    return PROJECT_PREFIX + quote(project, safe="")


def _escape(text: str) -> str:
    from ..memory import escape_for_block

    return escape_for_block(text)


class MemoryService:
    """The tools and resources over one ``Memory``, defaulting to one project; ``pinned``:
    that project only (a call or a resource naming another is refused)."""

    def __init__(self, memory: Memory, project: str, *, pinned: bool = False) -> None:
        self.memory = memory
        self.project = project_name(project)
        self.pinned = pinned
        # A client session's remember calls count as one turn's (gate.MAX_REMEMBER_PER_TURN).
        self._turns: dict[str, str] = {}

    def _turn(self, session: str) -> str:
        turn = self._turns.get(session)
        if turn is None:
            turn = self._turns[session] = f"mcp-{uuid.uuid4().hex[:12]}"
        return turn

    def call(
        self, name: str, arguments: Mapping[str, Any] | None, session: str
    ) -> tuple[str, bool]:
        """Run one tool for the client session named ``session`` (``sdk.session_key``): its
        text and whether it is an error; a client's mistake comes back as ``Error: ...``
        text its model can read and correct."""
        args = dict(arguments or {})
        try:
            project = self._project(args.pop("project", None))
            if name in MEMORY_TOOLS:
                turn = self._turn(session)
                tools = MemoryTools(self.memory, SOURCE, current_turn=lambda: turn, project=project)
                text = tools.call(name, args)
                return text, text.startswith("Error: ")
            handler = {
                "list_facts": self._list_facts,
                "forget": self._forget,
                "add_messages": self._add_messages,
            }.get(name)
            if handler is None:
                raise ToolError(f"unknown tool {_escape(name)}; available: {', '.join(TOOLS)}")
            return truncate_to_tokens(handler(project, **args), MAX_RESULT_TOKENS), False
        except ToolError as exc:
            return f"Error: {exc}", True
        except (MemoryFileError, HomeError) as exc:  # memory.json or the home as it is now
            return f"Error: {_escape(str(exc))}", True
        except (TypeError, ValueError) as exc:
            return f"Error: bad arguments for {_escape(name)}: {_escape(str(exc))}", True

    def _project(self, given: object) -> str:
        if given is None or given == "":
            return self.project
        if not isinstance(given, str):
            raise ToolError("project must be a project's name, or left out for the server's")
        try:
            named = check_project_name(given)
        except ValueError as exc:
            raise ToolError(f"project: {_escape(str(exc))}") from None
        return self._allowed(named)

    def _allowed(self, project: str) -> str:
        """``project``, unless the server is pinned to another one (a ToolError)."""
        if self.pinned and project != self.project:
            raise ToolError(
                f"this server serves project {_escape(self.project)} only (started with "
                "--pin); leave project out, or ask the user to start one for the other project"
            )
        return project

    def _facts(self, project: str) -> list[dict[str, Any]]:
        """What ``project`` sees (its facts and the user's), most confident first."""
        seen = self.memory.search("", k=1 << 30, relevant_only=False, project=project)
        return [fact for fact, _ in seen]

    def _list_facts(
        self, project: str, category: str | None = None, offset: int = 0, limit: int = LIST_LIMIT
    ) -> str:
        if category is not None and category not in CATEGORIES:
            raise ToolError(f"category must be one of: {', '.join(CATEGORIES)}")
        if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit < 1:
            raise ToolError("offset must be 0 or more and limit 1 or more")
        facts = [f for f in self._facts(project) if category in (None, f.get("category"))]
        where = f"the user's and project {_escape(project)}'s"
        if not facts:
            return (
                f"No facts ({where}) in memory"
                + (f" of category {category}" if category else "")
                + "."
            )
        page = facts[offset : offset + limit]
        if not page:
            return f"No facts past {offset}: there are {len(facts)} ({where})."
        head = (
            f"Facts {offset + 1}-{offset + len(page)} of {len(facts)} ({where}), most "
            "confident first (id | category | confidence | fact):"
        )
        return fit(head, [fact_line(f) for f in page])

    def _forget(self, project: str, fact_id: str) -> str:
        if not isinstance(fact_id, str) or not fact_id.strip():
            raise ToolError("fact_id must be a fact's id, as list_facts shows it")
        fact = next((f for f in self._facts(project) if f.get("id") == fact_id.strip()), None)
        if fact is None:
            raise ToolError(
                f"no fact {_escape(fact_id)} among the user's and project "
                f"{_escape(project)}'s facts; list_facts shows their ids"
            )
        outcome = self.memory.facts.forget_outside([fact["id"]], source=SOURCE)
        line = fact_line(fact).removeprefix("- ")
        if outcome["pending_id"] is not None:
            return (
                f"Held for the user's review as pending change {outcome['pending_id']}: {line} "
                "(it is removed only when the user approves it, with %memory pending)"
            )
        if fact["id"] in outcome["removed"]:
            return f"Forgot: {line}"
        why = "; ".join(_escape(h["reason"]) for h in outcome["held"]) or "memory changed meanwhile"
        return f"Not forgotten ({why}): {line}"

    def _add_messages(self, project: str, thread: str, messages: list[Any]) -> str:
        if not isinstance(thread, str) or not thread.strip():
            raise ToolError("thread must be the conversation's name")
        if not isinstance(messages, list) or not messages:
            raise ToolError("messages must be a list of {role: user | assistant, content: text}")
        if len(messages) > MAX_MESSAGES:
            raise ToolError(f"at most {MAX_MESSAGES} messages a call; send the rest in another")
        self.memory.add_messages(thread, messages, project=project)
        return (
            f"Journaled {len(messages)} messages in thread {_escape(thread_name(thread))} of "
            f"project {_escape(project)}; memory folds them into facts after a short wait."
        )

    # -- resources ---------------------------------------------------------------------
    def resources(self) -> list[ResourceSpec]:
        """The user's profile and the server's project's summary."""
        return [
            ResourceSpec(PROFILE_URI, "profile", "The user's profile: work, personal, top of mind"),
            ResourceSpec(
                project_uri(self.project),
                f"project {self.project}",
                f"What memory knows about project {self.project}: its summary",
            ),
        ]

    def templates(self) -> list[ResourceSpec]:
        """Any project's summary, by name."""
        uri = PROJECT_PREFIX + "{project}"
        return [ResourceSpec(uri, "project", "What memory knows about a project: its summary")]

    def read(self, uri: str) -> str:
        """A resource's text, escaped as the tools' results are; ValueError for an unknown uri."""
        from ..memory import Scope, scoped_view

        try:
            data = self.memory.data
        except (MemoryFileError, HomeError) as exc:  # said as one line to the client
            raise ValueError(_escape(str(exc))) from None
        if uri == PROFILE_URI:
            user = data.get("user") or {}
            lines = []
            for name in USER_SECTIONS:
                section = user.get(name) if isinstance(user.get(name), dict) else {}
                summary = _escape(str(section.get("summary") or "")) or "(nothing yet)"
                lines.append(f"{_SECTION_NAMES[name]}: {summary}")
            return "\n".join(lines)
        if uri.startswith(PROJECT_PREFIX):
            try:  # a name as a call's: checked by the one rule, within the pin
                project = self._allowed(check_project_name(unquote(uri[len(PROJECT_PREFIX) :])))
            except ToolError as exc:
                raise ValueError(str(exc)) from None
            context = scoped_view(data, Scope.of(project)).data.get("projectContext") or {}
            summary = _escape(str(context.get("summary") or "")) or "(nothing yet)"
            return f"Project {_escape(project)}: {summary}"
        raise ValueError(f"no resource {_escape(uri)}; read {PROFILE_URI} or {PROJECT_PREFIX}NAME")
