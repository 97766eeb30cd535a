"""What a ``%%agent`` message may refer to: ``{expressions}`` with ``-i`` (``{len(df)}``,
``{In[3]}``, ``{Out[3]}``, ``{Err[3]}``, as in jupyter-ai), and the last error for
``--error``.

IPython keeps each cell's source (``In``) and result (``Out``) but not its error, so the
extension records every failed cell's error and traceback as text (``Err``), by cell
number, from a ``post_run_cell`` hook it registers at ``%load_ext``.
"""

from __future__ import annotations

import re
import sys
import traceback
from typing import Any

from IPython.core.error import UsageError

PROG = "%%agent"
ERROR_CHARS = 6000  # at most this much of a traceback goes into a message (its end kept)
_ATTR = "_deerflow_nb_errors"
_BRACES = re.compile(r"\{\{|\}\}|\{([^{}\n]+)\}")
# Braces that start like a call, an index or an attribute (``{len(``, ``{df[``, ``{df.``)
# were meant as code: when they do not compile, -i says so instead of sending them as typed.
_MEANT_AS_CODE = re.compile(r"\s*[A-Za-z_]\w*\s*[(\[.]")


def format_error(error: BaseException) -> str:
    """``error`` with its traceback as plain text, IPython's own frames left out and the
    end kept when it is long."""
    tb = error.__traceback__
    while tb is not None and "IPython" in tb.tb_frame.f_code.co_filename:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb)).rstrip()
    return text if len(text) <= ERROR_CHARS else "…" + text[-ERROR_CHARS:]


def cell_errors(shell: Any) -> dict[int, str]:
    """Each failed cell's error and traceback by cell number (``{Err[n]}``), the most
    recent last."""
    errors = getattr(shell, _ATTR, None)
    if errors is None:
        errors = {}
        setattr(shell, _ATTR, errors)
    return errors


def _recorder(shell: Any) -> Any:
    def record(result: Any) -> None:
        error = result.error_before_exec or result.error_in_exec
        if error is None or result.execution_count is None:
            return
        source = getattr(result.info, "raw_cell", "") or ""
        if source.lstrip().startswith(("%agent", "%%agent")):
            return  # an agent cell's own error is not the one to explain next
        errors = cell_errors(shell)
        errors.pop(result.execution_count, None)  # the newest stays last
        errors[result.execution_count] = format_error(error)

    record.__qualname__ = "deerflow_nb_record_error"
    return record


def start_recording(shell: Any) -> None:
    """Record every failed cell's error from now on (``%load_ext``)."""
    stop_recording(shell)
    hook = _recorder(shell)
    setattr(shell, _ATTR + "_hook", hook)
    shell.events.register("post_run_cell", hook)


def stop_recording(shell: Any) -> None:
    hook = getattr(shell, _ATTR + "_hook", None)
    if hook is not None:
        shell.events.unregister("post_run_cell", hook)
        setattr(shell, _ATTR + "_hook", None)


def interpolate(text: str, namespace: dict[str, Any], errors: dict[int, str] | None = None) -> str:
    """Replace each ``{expression}`` with its value, evaluated in ``namespace`` (``Err`` is
    ``errors`` unless the namespace has its own), once; ``{{``/``}}`` give literal braces.

    Braces holding no Python expression (``{1: 2}``, ``f"{x!r}"``, JSON) are left exactly
    as written; a name that is not defined, or an expression that fails, is a one-line
    ``UsageError``.
    """
    extra = {} if "Err" in namespace else {"Err": errors if errors is not None else {}}

    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        source = match.group(1).strip()
        if source.isidentifier():
            if source not in namespace:
                raise UsageError(
                    f"{PROG} -i: no variable named '{source}'; define it, or write "
                    f"{{{{{source}}}}} for literal braces"
                )
            return str(namespace[source])
        try:
            code = compile(source, "<%%agent -i>", "eval")
        except (SyntaxError, ValueError) as exc:
            if not _MEANT_AS_CODE.match(source):
                return token
            what = exc.msg if isinstance(exc, SyntaxError) else str(exc)
            raise UsageError(
                f"{PROG} -i: {{{source}}} is not a Python expression ({what}); fix it, or "
                "write {{…}} for literal braces"
            ) from None
        try:
            return str(
                eval(code, namespace, {k: v for k, v in extra.items() if k not in namespace})
            )
        except Exception as exc:
            what = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise UsageError(
                f"{PROG} -i: {{{source}}} failed ({what}); fix it, or write {{{{…}}}} for "
                "literal braces"
            ) from None

    return _BRACES.sub(substitute, text)


def last_error(shell: Any) -> str:
    """The last failed cell as a message for the agent: the cell's source and its error
    with the traceback; a ``UsageError`` when nothing has failed yet."""
    errors = cell_errors(shell)
    if errors:
        number = next(reversed(errors))
        sources = shell.user_ns.get("In", [])
        source = sources[number] if 0 < number < len(sources) else ""
        where = f"Cell [{number}]"
        text = errors[number]
    else:
        error = getattr(sys, "last_value", None)  # a cell that failed before %load_ext
        if error is None or isinstance(error, UsageError):  # (not a magic's own message)
            raise UsageError(
                f"{PROG} --error: no cell has failed yet; run the failing cell, then ask again"
            )
        where, source, text = "The last cell", "", format_error(error)
    from ..untrusted import code_block

    code = f"{where}:\n{code_block(source.rstrip(), 'python')}\n" if source.strip() else ""
    return (
        f"Explain this error and how to fix it.\n\n{code}{where} failed with:\n{code_block(text)}"
    )
