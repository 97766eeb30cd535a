"""Notebook tools: what the agent may look at in the user's kernel, as OpenAI function specs.

Reading is always allowed (variables, cells); running code is a separate tool that is
only offered when the user turns it on, and it shows the code before it runs. pandas
and numpy are never imported here: objects are recognised by their type's module, so
describing a DataFrame works without making ``import deerflow_nb`` heavy.
"""

from __future__ import annotations

import json
import re
import threading
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..tokens import count_tokens, truncate_to_tokens

if TYPE_CHECKING:
    from ..llm.base import ToolCall

READ_TOOLS = ("list_variables", "describe_variable", "read_cell")
# The lead agent's memory tools (never a sub-agent's): facts, the journal, and "remember".
MEMORY_TOOLS = ("search_memory", "recall", "remember")
# schema.CATEGORIES, spelled out so this module does not import pydantic (a test keeps
# the two equal).
FACT_CATEGORIES = ("preference", "knowledge", "context", "behavior", "goal", "correction")
MAX_RESULT_TOKENS = 2000
SEARCH_K = 10  # facts search_memory lists by default
RECALL_K = 8  # messages recall lists by default
MAX_K = 20
EXCERPT_CHARS = 280  # of one recalled message
REMEMBER_CONFIDENCE = 0.95  # the user asked for it in so many words
MAX_REMEMBER_CHARS = 500
VARIABLES_IN_PROMPT = 20  # at most this many names in the lead's system prompt
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
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for; '' lists all"},
                "k": {"type": "integer", "description": f"how many facts (default {SEARCH_K})"},
            },
            "required": ["query"],
        },
    },
    "recall": {
        "description": (
            "Search earlier conversations (the user's messages and your replies in every "
            "thread) for what was said, best match first, with thread, date and an excerpt. "
            "Use it when the user refers to the past: 'last time', 'what did we discuss "
            "about ...', 'what did I tell you about ...'."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words, names or dates to find"},
                "thread": {"type": "string", "description": "only this thread (optional)"},
                "k": {"type": "integer", "description": f"how many messages (default {RECALL_K})"},
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
                "category": {"type": "string", "enum": list(FACT_CATEGORIES)},
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


class _ToolSet:
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


class NotebookTools(_ToolSet):
    """The read tools (and optionally ``run_code``) bound to one namespace and shell."""

    def __init__(
        self,
        namespace: dict[str, Any],
        shell: Any = None,
        *,
        allow_code: bool = False,
        show: Callable[[str], None] | None = None,
        propose: bool = True,
    ) -> None:
        self.namespace = namespace
        self.shell = shell
        self.allow_code = allow_code and shell is not None
        self._show = show
        # propose_cell: only with a shell to put the cell in, and only from the thread that
        # made these tools (the lead's); the proposals of one turn, combined into one cell.
        self.propose = propose and hasattr(shell, "set_next_input")
        self._owner = threading.get_ident()
        self._proposed: list[str] = []

    @property
    def names(self) -> tuple[str, ...]:  # type: ignore[override]
        names = (*READ_TOOLS, "run_code") if self.allow_code else READ_TOOLS
        return (*names, "propose_cell") if self.propose else names

    def read_only(self) -> NotebookTools:
        """The same tools without ``run_code`` and ``propose_cell`` (for sub-agents, which
        run off the main thread)."""
        return NotebookTools(self.namespace, self.shell, allow_code=False, propose=False)

    def variables_brief(self, limit: int = VARIABLES_IN_PROMPT) -> str:
        """The notebook's variables for the lead's system prompt, at most ``limit``:
        ``<notebook_variables>`` with ``- name: type`` lines, and ``- … and N more`` when
        capped; "" when there are none. Names are identifiers and types word characters,
        so nothing in them can close the tag (types are never sized: ``len`` may run a
        lazy query)."""
        items = [(n, o) for n, o in self._user_items() if isinstance(n, str) and n.isidentifier()]
        if not items:
            return ""
        shown = items[:limit]
        lines = [f"- {name}: {_safe_type_name(obj)}" for name, obj in shown]
        if len(items) > limit:
            lines.append(f"- … and {len(items) - limit} more (list_variables lists them all)")
        head = f"The user's notebook variables (name: type), {len(shown)} of {len(items)}:"
        return "<notebook_variables>\n" + "\n".join([head, *lines]) + "\n</notebook_variables>"

    # -- tools -------------------------------------------------------------------
    def list_variables(self) -> str:
        rows = [f"{name}: {_type_name(obj)}{_size(obj)}" for name, obj in self._user_items()]
        return "\n".join(rows) if rows else "No user variables are defined yet."

    def describe_variable(self, name: str) -> str:
        if name not in self.namespace or name.startswith("_"):
            known = ", ".join(n for n, _ in self._user_items()) or "none"
            raise ToolError(f"no variable named '{name}' (variables: {known})")
        return describe(name, self.namespace[name])

    def read_cell(self, number: int, part: str = "source") -> str:
        if self.shell is None:
            raise ToolError("no notebook is attached to this agent")
        sources = self.shell.user_ns.get("In", [])
        if not isinstance(number, int) or not 0 < number < len(sources):
            raise ToolError(f"no cell [{number}]; cells run so far: 1..{len(sources) - 1}")
        if part == "source":
            return sources[number]
        if part == "output":
            outputs = self.shell.user_ns.get("Out", {})
            if number not in outputs:
                return f"Cell [{number}] has no output value (it printed or displayed nothing)."
            return _short_repr(outputs[number], 4000)
        raise ToolError("part must be 'source' or 'output'")

    def run_code(self, code: str) -> str:
        """Show the code, run it as a cell, and return what it printed and its result."""
        from IPython.utils.capture import capture_output

        if self._show is not None:  # all of it, in a fence nothing in the code can close
            self._show(code_to_run(code))
        with capture_output() as captured:
            result = self.shell.run_cell(code, store_history=False)
        captured.show()
        if isinstance(result.error_in_exec, KeyboardInterrupt):
            raise KeyboardInterrupt  # run_cell caught the user's Ctrl-C: it stops the turn
        parts = []
        if captured.stdout:
            parts.append(f"stdout:\n{captured.stdout}")
        if captured.stderr:
            parts.append(f"stderr:\n{captured.stderr}")
        if result.result is not None:
            parts.append(f"result: {_short_repr(result.result, 2000)}")
        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            parts.append(f"error: {type(error).__name__}: {error}")
        return "\n".join(parts) or "The code ran and printed nothing."

    def propose_cell(self, code: str) -> str:
        """Insert ``code`` as the next cell for the user to run (not run here). Several
        proposals in one turn go into that one cell: the front end keeps only the last."""
        if threading.get_ident() != self._owner:
            raise ToolError("propose_cell works only in the lead agent")
        if not isinstance(code, str) or not code.strip():
            raise ToolError("propose_cell needs the cell's Python source in 'code'")
        self._proposed.append(code.strip("\n"))
        self.shell.set_next_input("\n\n".join(self._proposed), replace=False)
        lines = code.strip("\n").count("\n") + 1
        combined = (
            f" The cell holds all {len(self._proposed)} proposals of this turn."
            if len(self._proposed) > 1
            else ""
        )
        return (
            f"Proposed a new cell below with {lines} line{'s' * (lines != 1)} of code. It has "
            f"not been run: the user reads, edits and runs it.{combined}"
        )

    def _user_items(self) -> list[tuple[str, Any]]:
        hidden = getattr(self.shell, "user_ns_hidden", {}) if self.shell is not None else {}
        items = []
        for name, obj in self.namespace.items():
            if name.startswith("_") or name in hidden or name in ("In", "Out"):
                continue
            if isinstance(obj, types.ModuleType | types.FunctionType | type):
                continue
            items.append((name, obj))
        return items


def _type_name(obj: Any) -> str:
    cls = type(obj)
    module = cls.__module__.split(".")[0]
    return cls.__name__ if module == "builtins" else f"{module}.{cls.__name__}"


def _safe_type_name(obj: Any) -> str:
    """The type's name for the prompt: word characters and dots only, short."""
    name = re.sub(r"[^\w.]", "_", _type_name(obj))[:60]
    return name or "object"


def _size(obj: Any) -> str:
    """``, shape (…)`` or ``, len N`` when the object says; "" when it cannot (a lazy
    query's ``len`` may raise anything, and one such variable must not hide the rest)."""
    try:
        shape = getattr(obj, "shape", None)
        if isinstance(shape, tuple):
            return f", shape {shape}"
        return f", len {len(obj)}"
    except Exception:
        return ""


def _short_repr(obj: Any, limit: int) -> str:
    try:
        text = repr(obj)
    except Exception as exc:
        text = f"<{type(obj).__name__} whose repr failed: {type(exc).__name__}: {exc}>"
    return text if len(text) <= limit else text[:limit] + "…"


def describe(name: str, obj: Any) -> str:
    """A compact, model-readable description of one object."""
    module = type(obj).__module__.split(".")[0]
    kind = type(obj).__name__
    if module == "pandas" and kind == "DataFrame":
        return _describe_dataframe(name, obj)
    if module == "pandas" and kind == "Series":
        return _describe_series(name, obj)
    if module == "numpy" and kind == "ndarray":
        return _describe_array(name, obj)
    if isinstance(obj, dict):
        sample = {k: obj[k] for k in list(obj)[:10]}
        return f"{name}: dict with {len(obj)} keys\nsample: {_short_repr(sample, 1500)}"
    if isinstance(obj, list | tuple | set | frozenset):
        items = list(obj)
        types_seen = sorted({type(x).__name__ for x in items})
        return (
            f"{name}: {kind} of {len(items)} items (types: {', '.join(types_seen) or 'none'})\n"
            f"first items: {_short_repr(items[:10], 1500)}"
        )
    return f"{name}: {_type_name(obj)}{_size(obj)}\nvalue: {_short_repr(obj, 1500)}"


def _describe_dataframe(name: str, df: Any) -> str:
    rows, cols = df.shape
    dtypes = ", ".join(f"{c}: {t}" for c, t in df.dtypes.astype(str).items())
    missing = df.isna().sum()
    missing_text = ", ".join(f"{c}: {int(n)}" for c, n in missing.items() if n) or "none"
    return (
        f"{name}: pandas DataFrame, {rows} rows x {cols} columns\n"
        f"dtypes: {dtypes}\n"
        f"missing values: {missing_text}\n"
        f"head:\n{df.head(5).to_string()}"
    )


def _describe_series(name: str, series: Any) -> str:
    return (
        f"{name}: pandas Series '{series.name}', {len(series)} values, dtype {series.dtype}\n"
        f"missing values: {int(series.isna().sum())}\n"
        f"head:\n{series.head(5).to_string()}"
    )


def _describe_array(name: str, array: Any) -> str:
    text = f"{name}: numpy ndarray, shape {array.shape}, dtype {array.dtype}"
    if array.size and array.dtype.kind in "iuf":
        text += f"\nmin {array.min()}, max {array.max()}, mean {array.mean():.4g}"
    return text + f"\nvalues: {_short_repr(array, 1000)}"


def parse_arguments(raw: str) -> dict[str, Any]:
    """A tool call's JSON arguments, or a ToolError the model can correct."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ToolError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ToolError("arguments must be a JSON object")
    return value


# -- memory tools (the lead agent's only) ---------------------------------------------
class MemoryTools(_ToolSet):
    """``search_memory``, ``recall`` and ``remember``, bound to one ``Memory`` and the
    turn's thread. Only the lead agent gets them: sub-agents take
    ``NotebookTools.read_only()``, which has none.

    Facts and journal text are untrusted (an imported memory.json or an old reply can
    hold anything): each fact or excerpt becomes one line with ``&``, ``<`` and ``>`` as
    entities and no control, bidi or zero-width characters (``injection.escape``), so
    nothing in a result can forge or close a tag of the prompt.
    """

    names = MEMORY_TOOLS

    def __init__(
        self,
        memory: Any,
        thread: str,
        *,
        current_turn: Callable[[], str | None] | None = None,
    ) -> None:
        self.memory = memory
        self.thread = thread
        self._current_turn = current_turn  # its messages are never "the past"

    def search_memory(self, query: str = "", k: int = SEARCH_K) -> str:
        from ..memory.injection import escape

        query = _text_argument(query, "query", required=False)
        k = _count(k, SEARCH_K)
        hits = [fact for fact, _ in self.memory.search(query, k=k)] if query.strip() else []
        total = len(self.memory.data.get("facts", []))
        if hits:
            head = (
                f'{len(hits)} of {total} remembered facts match "{escape(query)}", best first '
                "(id | category | confidence | fact):"
            )
        else:
            hits = self.memory.facts()[:k]
            if not hits:
                return "Memory holds no facts about the user yet."
            miss = f'No remembered fact matches "{escape(query)}"; ' if query.strip() else ""
            head = (
                f"{miss}the {len(hits)} most confident of {total} facts "
                "(id | category | confidence | fact):"
            )
        return _fit(head, [_fact_line(f) for f in hits])

    def recall(self, query: str, thread: str | None = None, k: int = RECALL_K) -> str:
        from ..memory.injection import escape

        query = _text_argument(query, "query")
        if thread is not None and not isinstance(thread, str):
            raise ToolError("thread must be a thread's name, or left out for every thread")
        thread = thread.strip() or None if isinstance(thread, str) else None
        k = _count(k, RECALL_K)
        skip = self._this_turn()
        hits = self.memory.recall(query, k=k + len(skip), thread=thread)
        hits = [h for h in hits if (h["thread"], h["seq"]) not in skip][:k]
        where = f" in thread {escape(thread)}" if thread else ""
        if not hits:
            return f'Nothing in earlier conversations{where} matches "{escape(query)}".'
        head = (
            f'{len(hits)} earlier messages{where} match "{escape(query)}", best first '
            "(date | thread | message number and speaker: excerpt):"
        )
        lines = []
        for hit in hits:
            stamp = str(hit.get("created_at") or "")[:16].replace("T", " ") or "undated"
            text = escape(excerpt(str(hit.get("content") or ""), query))
            lines.append(
                f"- {escape(stamp)} | {escape(str(hit['thread']))} | "
                f"#{hit['seq']} {escape(str(hit['role']))}: {text}"
            )
        return _fit(head, lines)

    def remember(self, content: str, category: str = "context") -> str:

        content = " ".join(_text_argument(content, "content").split())
        if len(content) > MAX_REMEMBER_CHARS:
            raise ToolError(
                f"a fact is one short sentence (at most {MAX_REMEMBER_CHARS} characters); "
                "split it into several remember calls"
            )
        if category not in FACT_CATEGORIES:
            raise ToolError(f"category must be one of: {', '.join(FACT_CATEGORIES)}")
        before = {f.get("id") for f in self.memory.data.get("facts", [])}
        try:
            fact = self.memory.add_fact(content, category, REMEMBER_CONFIDENCE, source=self.thread)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        line = _fact_line(fact).removeprefix("- ")
        if fact.get("id") in before:
            return f"Already remembered, now confirmed: {line}"
        return f"Remembered: {line} (stored now; the user can see it with %memory facts)"

    def _this_turn(self) -> set[tuple[str, int]]:
        """(thread, seq) of the current turn's messages: the question being asked is not
        something said before."""
        turn = self._current_turn() if self._current_turn is not None else None
        if not turn:
            return set()
        return self.memory.journal.turn_places(turn)


def _fit(head: str, lines: list[str]) -> str:
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


def _fact_line(fact: dict[str, Any]) -> str:
    from ..memory.injection import escape

    try:
        confidence = float(fact.get("confidence", 0))
    except (TypeError, ValueError):
        confidence = 0.0
    return (
        f"- {escape(str(fact.get('id', '?')))} | {escape(str(fact.get('category', 'context')))}"
        f" | {confidence:.2f} | {escape(str(fact.get('content', '')))}"
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


def code_to_run(code: str) -> str:
    """The Markdown ``run_code`` shows before it runs ``code``: all of it, in a fence that
    nothing in the code can close, its invisible characters written out as ``<U+XXXX>``."""
    from ..untrusted import code_block, reveal_invisible

    return f"**Running in your kernel:**\n\n{code_block(reveal_invisible(code), 'python')}"
