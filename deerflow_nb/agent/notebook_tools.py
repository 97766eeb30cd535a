"""The notebook tools: what the agent may look at (and, when allowed, run) in the user's kernel.

Reading is always allowed (variables, cells); running code is a separate tool that is
only offered when the user turns it on, and it shows the code before it runs. pandas
and numpy are never imported here: objects are recognised by their type's module, so
describing a DataFrame works without making ``import deerflow_nb`` heavy.
"""

from __future__ import annotations

import re
import threading
import types
from collections.abc import Callable
from typing import Any

from .tools import READ_TOOLS, ToolError, ToolSet

VARIABLES_IN_PROMPT = 20  # at most this many names in the lead's system prompt
# What the read tools answer where the agent runs without a kernel (JupyterLab's chat
# panel runs it in the Jupyter server): an honest "cannot see", not "no variables yet".
NO_KERNEL = (
    "there is no notebook kernel here (this agent runs outside any notebook), so no "
    "notebook variables or cells can be seen; ask in a %%agent cell of the notebook"
)


class NotebookTools(ToolSet):
    """The read tools (and optionally ``run_code``) bound to one namespace and shell."""

    def __init__(
        self,
        namespace: dict[str, Any],
        shell: Any = None,
        *,
        allow_code: bool = False,
        show: Callable[[str], None] | None = None,
        propose: bool = True,
        kernel: bool = True,
    ) -> None:
        self.namespace = namespace
        self.shell = shell
        self.kernel = kernel  # False: no kernel at all; the read tools say so (NO_KERNEL)
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
        return NotebookTools(
            self.namespace, self.shell, allow_code=False, propose=False, kernel=self.kernel
        )

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
        self._need_kernel()
        rows = [f"{name}: {_type_name(obj)}{_size(obj)}" for name, obj in self._user_items()]
        return "\n".join(rows) if rows else "No user variables are defined yet."

    def describe_variable(self, name: str) -> str:
        self._need_kernel()
        if name not in self.namespace or name.startswith("_"):
            known = ", ".join(n for n, _ in self._user_items()) or "none"
            raise ToolError(f"no variable named '{name}' (variables: {known})")
        return describe(name, self.namespace[name])

    def read_cell(self, number: int, part: str = "source") -> str:
        self._need_kernel()
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

    def _need_kernel(self) -> None:
        if not self.kernel:
            raise ToolError(NO_KERNEL)

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


def code_to_run(code: str) -> str:
    """The Markdown ``run_code`` shows before it runs ``code``: all of it, in a fence that
    nothing in the code can close, its invisible characters written out as ``<U+XXXX>``."""
    from ..untrusted import code_block, reveal_invisible

    return f"**Running in your kernel:**\n\n{code_block(reveal_invisible(code), 'python')}"
