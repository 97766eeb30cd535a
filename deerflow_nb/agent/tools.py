"""The tool protocol: the OpenAI function specs of every tool, and running a model's calls.

``NotebookTools`` (``notebook_tools``) and ``MemoryTools`` (``memory_tools``) are
``ToolSet``s: a call names one of their methods, and whatever goes wrong comes back to the
model as an ``Error: ...`` result it can read and correct.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..schema.constants import CATEGORIES
from ..tokens import truncate_to_tokens

if TYPE_CHECKING:
    from ..llm.base import ToolCall

READ_TOOLS = ("list_variables", "describe_variable", "read_cell")
# The lead agent's memory tools (never a sub-agent's): facts, the journal, and "remember".
MEMORY_TOOLS = ("search_memory", "recall", "remember")
MAX_RESULT_TOKENS = 2000
TOOL_SEARCH_K = 10  # facts the agent's search_memory lists by default
# Messages the agent's recall tool lists: fewer than memory.RECALL_K (what a person sees in
# %memory recall, the panel and the inspector), as each one costs the model tokens.
TOOL_RECALL_K = 8
SUBAGENT_TYPES = {
    "general-purpose": "Work through the task step by step with the notebook tools you have.",
}

_SPECS: dict[str, dict[str, Any]] = {
    "list_variables": {
        "description": "List the user's notebook variables: name, type and shape or length.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
    "describe_variable": {
        "description": (
            "Describe one notebook variable. DataFrames: shape, dtypes, head, missing values; "
            "arrays: shape, dtype, range; dicts and lists: length and a sample."
        ),
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "the variable's name"}},
            "required": ["name"],
        },
    },
    "read_cell": {
        "description": "Read the source or the output of a notebook cell by its execution number.",
        "parameters": {
            "type": "object",
            "properties": {
                "number": {"type": "integer", "description": "the cell's execution number"},
                "part": {"type": "string", "enum": ["source", "output"]},
            },
            "required": ["number"],
        },
    },
    "run_code": {
        "description": (
            "Run Python code in the user's kernel (the user can see it) and return its "
            "printed output, result or error."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python source"}},
            "required": ["code"],
        },
    },
    "propose_cell": {
        "description": (
            "Put Python code into a new cell below the current one, for the user to read, "
            "edit and run themself; it is not run. Use it when the user asks for code."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python source"}},
            "required": ["code"],
        },
    },
    "search_memory": {
        "description": (
            "Search the facts remembered about the user, best match first, including those "
            "the memory section of the prompt left out for space. Use it when the user asks "
            "what you know or remember about them, or when a fact might help but is not shown."
            " It looks in the user's facts and this project's."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for; '' lists all"},
                "k": {
                    "type": "integer",
                    "description": f"how many facts (default {TOOL_SEARCH_K})",
                },
            },
            "required": ["query"],
        },
    },
    "recall": {
        "description": (
            "Search earlier conversations (the user's messages and your replies in this "
            "project's threads) for what was said, best match first, with thread, date and "
            "an excerpt. Use it when the user refers to the past: 'last time', 'what did we "
            "discuss about ...', 'what did I tell you about ...'."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words, names or dates to find"},
                "thread": {"type": "string", "description": "only this thread (optional)"},
                "k": {
                    "type": "integer",
                    "description": f"how many messages (default {TOOL_RECALL_K})",
                },
            },
            "required": ["query"],
        },
    },
    "remember": {
        "description": (
            "Store one fact about the user in long-term memory now. Only when the user asks "
            "you to remember something. Write it as one short third-person statement, for "
            "example 'Prefers polars over pandas' or 'The test set is the last 3 months'."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "content": {"type": "string", "description": "the fact, one sentence"},
                "category": {"type": "string", "enum": list(CATEGORIES)},
                "scope": {
                    "type": "string",
                    "enum": ["user", "project"],
                    "description": "user: true in every project (who they are, preferences);"
                    " project: this project's data, columns, metrics, decisions, results",
                },
            },
            "required": ["content", "category"],
        },
    },
    "task": {
        "description": (
            "Hand a self-contained sub-task to a sub-agent. It starts with no conversation "
            "history, can read notebook variables and cells, and returns only its final answer."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "description": {"type": "string", "description": "a short label (3-6 words)"},
                "prompt": {"type": "string", "description": "everything the sub-agent needs"},
                "subagent_type": {"type": "string", "enum": list(SUBAGENT_TYPES)},
            },
            "required": ["description", "prompt"],
        },
    },
}


class ToolError(Exception):
    """A tool call the model got wrong; the message goes back to the model as the result."""


def tool_specs(names: list[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """OpenAI function specs for the named tools, in the given order."""
    return [{"type": "function", "function": {"name": n, **_SPECS[n]}} for n in names]


class ToolSet:
    """Running a model's tool calls on the methods named in ``names``."""

    names: tuple[str, ...] = ()

    def run_call(self, call: ToolCall) -> str:
        """Run a model's tool call; bad JSON arguments become an ``Error: ...`` result too."""
        try:
            arguments = parse_arguments(call.arguments)
        except ToolError as exc:
            return f"Error: {exc}"
        return self.call(call.name, arguments)

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool; a ``ToolError`` becomes an ``Error: ...`` result the model can read."""
        try:
            if name not in self.names:
                raise ToolError(f"unknown tool '{name}'; available: {', '.join(self.names)}")
            handler = getattr(self, name)
            result = handler(**arguments)
        except ToolError as exc:
            return f"Error: {exc}"
        except TypeError as exc:
            return f"Error: bad arguments for {name}: {exc}"
        except Exception as exc:  # the user's objects can fail in any way when inspected
            return f"Error: {name} failed: {type(exc).__name__}: {exc}"
        return truncate_to_tokens(result, MAX_RESULT_TOKENS)


def parse_arguments(raw: str) -> dict[str, Any]:
    """A tool call's JSON arguments, or a ToolError the model can correct."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ToolError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ToolError("arguments must be a JSON object")
    return value
