"""The offline model's reading of a failed cell or a cell's output sent in a message.

``%%agent --error`` sends the failed cell's source and its traceback; ``{Err[n]}`` with
``-i`` the traceback alone; ``{Out[n]}`` the output's text (``str`` of the value). The
offline model answers from what was sent, never from unrelated words in it: the
exception's type and message, the failing line of the cell (and the deepest line of the
user's own code, when a function defined in a cell raised), a hint for the common types,
and, for a variable the failing line names, what ``describe_variable`` says of it (a
DataFrame's columns, with the nearest name to a missing key). An output is described by
its kind and shape: a table's rows and columns, a Series' length and dtype, an array's
shape, a container's length.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field

from .words import WORD_RE

_TRACEBACK = "Traceback (most recent call last):"
# The --error message's source block (``cell_refs.last_error``): "Cell [3]:" then a fence.
_SOURCE_RE = re.compile(r"^Cell \[(\d+)\]:\n(`{3,})python\n(.*?)\n\2", re.MULTILINE | re.DOTALL)
_FRAME_RE = re.compile(r'^\s*File "([^"]+)", line (\d+)(?:, in (\S+))?\s*$')
# A notebook cell's frame: IPython's ``<ipython-input-3-…>`` or ``Cell In[3]``, ipykernel's
# ``/tmp/ipykernel_123/456.py``, and ``<cell>``, ``<stdin>``, ``<string>``.
_CELL_FILE_RE = re.compile(r"<ipython-input-\d+|ipykernel_\d+|^<(?:cell|stdin|string)")
_CELL_IN_RE = re.compile(r"^\s*Cell In\s*\[(\d+)\],\s*line (\d+)")
_EXCEPTION_RE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Iteration|"
    r"Timeout))(?::\s?(.*))?$"
)


@dataclass
class CellError:
    """What a traceback says: the exception, where in the cell, which variables it names."""

    kind: str
    message: str
    cell: int | None = None
    line: int | None = None  # in the failed cell
    code: str = ""  # that line
    inner: tuple[str, int, str] | None = None  # (function, line, code) deeper in user code
    names: list[str] = field(default_factory=list)  # identifiers on the failing line


def find_error(text: str) -> CellError | None:
    """The error a message carries (a traceback, with or without the cell's source), or
    None when it holds no traceback."""
    start = text.rfind(_TRACEBACK)
    if start < 0:
        return None
    lines = text[start:].splitlines()[1:]
    frames: list[tuple[str, int, str, str]] = []  # (file, line, function, code)
    kind, message = "", ""
    for i, line in enumerate(lines):
        frame = _FRAME_RE.match(line)
        cell_in = _CELL_IN_RE.match(line)
        if frame or cell_in:
            code = _code_after(lines, i)
            if frame:
                frames.append((frame.group(1), int(frame.group(2)), frame.group(3) or "", code))
            else:
                frames.append((f"<cell {cell_in.group(1)}>", int(cell_in.group(2)), "", code))
            continue
        found = _EXCEPTION_RE.match(line.strip())
        if found and not line.startswith((" ", "\t")):
            kind, message = found.group(1), (found.group(2) or "").strip()
        elif line.strip().startswith("```") and kind:
            break  # the end of the fenced traceback
    if not kind:
        return None
    error = CellError(kind.rsplit(".", 1)[-1], message)
    source = _SOURCE_RE.search(text)
    if source:
        error.cell = int(source.group(1))
    cells = [f for f in frames if _CELL_FILE_RE.search(f[0]) or f[0].startswith("<cell ")]
    entry = cells[0] if cells else (frames[-1] if frames else None)
    if entry is not None:
        error.line = entry[1]
        error.code = entry[3]
        if source and not error.code:
            source_lines = source.group(3).splitlines()
            if 0 < entry[1] <= len(source_lines):
                error.code = source_lines[entry[1] - 1].strip()
        if cells and cells[-1] is not entry and cells[-1][2] not in ("", "<module>"):
            error.inner = (cells[-1][2], cells[-1][1], cells[-1][3])
    error.names = list(dict.fromkeys(WORD_RE.findall(_without_strings(error.code))))
    return error


def _code_after(lines: list[str], i: int) -> str:
    """The code line a traceback prints under frame ``i`` (its first indented line)."""
    if i + 1 < len(lines):
        following = lines[i + 1]
        if following.startswith((" ", "\t")) and not _FRAME_RE.match(following):
            text = following.strip()
            if text and not set(text) <= set("^~ "):
                return text
    return ""


def _without_strings(code: str) -> str:
    return re.sub(r"(['\"]).*?\1", " ", code)


# -- the answer to an error -------------------------------------------------------------
_HINTS = {
    "KeyError": "the key {m} is not among the keys (or columns) of what that line indexes",
    "NameError": "{m}: run the cell that defines it first, or check its spelling",
    "AttributeError": "{m}: check the name, or the object's type (`type(...)`, `dir(...)`)",
    "ZeroDivisionError": "a divisor on that line is zero: check it before dividing",
    "ModuleNotFoundError": "{m}: install it in the kernel's environment (`%pip install …`), "
    "then restart the kernel",
    "ImportError": "{m}: check the name and the installed version of the package",
    "IndexError": "{m}: the position is past the end (check the length first)",
    "TypeError": "{m}: a value on that line is not of the type the operation expects",
    "ValueError": "{m}: a value has the right type but one the call does not accept",
    "FileNotFoundError": "{m}: the path does not exist from the kernel's working directory "
    "(`os.getcwd()`)",
    "SyntaxError": "Python could not parse the cell: {m}",
    "IndentationError": "Python could not parse the cell's indentation: {m}",
    "RecursionError": "a function calls itself without reaching a stop",
    "MemoryError": "the data does not fit in memory: work on a sample or in chunks",
}


def error_answer(
    error: CellError, described: dict[str, str], prefix: str, variables: list[str] = ()
) -> str:
    """What the offline model says about ``error``; ``described`` holds what
    ``describe_variable`` returned for the variables the failing line names, ``variables``
    the notebook's (a name not defined is matched against them)."""
    said = f"{error.kind}: {error.message}" if error.message else error.kind
    where = ""
    if error.line is not None:
        cell = f" of cell [{error.cell}]" if error.cell is not None else ""
        where = f" at line {error.line}{cell}"
        if error.code:
            where += f": `{_inline(error.code)}`"
    parts = [f"{prefix}The cell raised {_inline(said)}{where}."]
    if error.inner is not None:
        function, line, code = error.inner
        inside = f" `{_inline(code)}`" if code else ""
        parts.append(f"It was raised inside `{function}`, at line {line}:{inside}.")
    hint = _HINTS.get(error.kind)
    if hint:
        text = hint.format(m=_inline(error.message) or "it")
        parts.append(text[:1].upper() + text[1:] + ".")
    missing = re.match(r"name '(\w+)' is not defined", error.message)
    if error.kind == "NameError" and missing:
        near = difflib.get_close_matches(missing.group(1), list(variables), n=1, cutoff=0.6)
        if near:
            parts.append(f"The notebook has `{near[0]}`: did you mean it?")
    for name, description in described.items():
        parts.append(_variable_note(name, description, error))
    parts.append(
        "(Read from the traceback's last line and the failing line; a real model explains "
        "further: configure OPENAI_API_KEY, or OPENAI_BASE_URL for another server.)"
    )
    return " ".join(p for p in parts if p)


def _variable_note(name: str, description: str, error: CellError) -> str:
    """One sentence on a variable of the failing line, from its description: a DataFrame's
    columns (and the nearest to a missing key), else its first line."""
    columns = _columns(description)
    if columns is None:
        first = description.strip().splitlines()[0] if description.strip() else ""
        return f"`{name}` is {_inline(first.split(': ', 1)[-1])}." if first else ""
    shown = ", ".join(columns[:20]) + (" …" if len(columns) > 20 else "")
    note = f"`{name}`'s columns are {_inline(shown)}"
    key = _key_of(error)
    if key is not None:
        near = difflib.get_close_matches(key, columns, n=1, cutoff=0.6)
        if near:
            note += f": did you mean '{_inline(near[0])}'?"
            return note
    return note + "."


def _columns(description: str) -> list[str] | None:
    """The column names a DataFrame description lists (``dtypes: a: int64, b: str``)."""
    if "DataFrame" not in description.split("\n", 1)[0]:
        return None
    for line in description.splitlines():
        if line.startswith("dtypes: "):
            return [part.rsplit(": ", 1)[0] for part in line[len("dtypes: ") :].split(", ")]
    return None


def _key_of(error: CellError) -> str | None:
    if error.kind != "KeyError":
        return None
    try:
        key = ast.literal_eval(error.message)
    except (ValueError, SyntaxError):
        return error.message or None
    return key if isinstance(key, str) else None


def _inline(text: str) -> str:
    """``text`` on one line without backticks, so it sits inside inline code."""
    return " ".join(str(text).replace("`", "'").split())[:300]


# -- the answer to an output ------------------------------------------------------------
_FOOTER_RE = re.compile(r"\[(\d+) rows x (\d+) columns\]")
_SERIES_RE = re.compile(r"^(?:Name: (.+?), )?(?:Length: (\d+), )?dtype: (\w+)\s*$", re.MULTILINE)
_ARRAY_RE = re.compile(r"\barray\((\[.*\])(?:,\s*dtype=(\w+))?\)", re.DOTALL)
# A printed array (``str``, as ``{Out[n]}`` sends it): "[[0 1 2]\n [3 4 5]]".
_PRINTED_ARRAY_RE = re.compile(r"\[\[[-\d.eE+\s\[\]]*\]\]")
_STATS = {"count", "mean", "std", "min", "max"}
_FENCED_RE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)


def _as_list(printed: str) -> str:
    """A printed array as a list literal: numbers and rows separated by commas."""
    text = re.sub(r"(?<=[\d.])\s+(?=[-\d.])", ", ", printed.strip())
    return re.sub(r"\]\s*\[", "], [", text)


def output_answer(text: str, prefix: str, *, literals: bool = False) -> str | None:
    """What the offline model says of a cell output in ``text`` (its kind and shape), or
    None when it finds none: a table, a Series, an array; with ``literals``, also a list,
    tuple, dict or set the message ends with (else an ordinary request naming a list,
    "drop the columns ['a', 'b']", would be taken for an output). Code in fences is code,
    not an output."""
    text = _FENCED_RE.sub("\n", text)
    if (series := _SERIES_RE.search(text)) is not None:
        name, length, dtype = series.groups()
        body = text[: series.start()].strip().splitlines()
        count = int(length) if length else len([ln for ln in body[-200:] if ln.strip()])
        named = f" named {_inline(name)}" if name else ""
        return (
            f"{prefix}The output you sent is a Series{named} of dtype {dtype}, "
            f"{count} value{'s' * (count != 1)}."
        )
    if (table := _table(text)) is not None:
        rows, columns, index, total = table
        n_rows, n_columns = total or (len(rows), len(columns))
        shape = f"{n_rows} row{'s' * (n_rows != 1)} × {n_columns} column{'s' * (n_columns != 1)}"
        what = f"{prefix}The output you sent is a table (a DataFrame's text) of {shape}"
        what += f"; its columns: {_inline(', '.join(columns[:20]))}"
        if set(index) >= _STATS:
            what += f"; its rows are {_inline(', '.join(index))}: summary statistics, as "
            what += "`describe()` gives"
        return what + "."
    array = _ARRAY_RE.search(text)
    printed = _PRINTED_ARRAY_RE.search(text)
    if array is not None or printed is not None:
        body = array.group(1) if array is not None else _as_list(printed.group(0))
        shape = _nested_shape(body)
        dtype = f" of dtype {array.group(2)}" if array is not None and array.group(2) else ""
        if shape is not None and (array is not None or len(shape) >= 2):
            dims = ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "")
            return f"{prefix}The output you sent is a NumPy array{dtype} of shape ({dims})."
    if not literals:
        return None
    literal = _literal(text)
    if isinstance(literal, (list, tuple, dict, set)) and literal:
        kind = type(literal).__name__
        return f"{prefix}The output you sent is a {kind} of {len(literal)} items."
    return None


def _table(text: str) -> tuple[list[str], list[str], list[str], tuple[int, int] | None] | None:
    """A DataFrame's text in ``text``: its row lines, column names, index labels, and the
    ``[N rows x M columns]`` footer's shape when it has one."""
    lines = text.splitlines()
    best: list[int] = []
    run: list[int] = []
    for i, line in enumerate(lines):
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 2 and line.strip():
            run.append(i)
            if len(run) > len(best):
                best = list(run)
        else:
            run = []
    if len(best) < 3:
        return None
    header = lines[best[0]]
    glued = re.search(r"\s{4,}(\S.*)$", header)  # "What is this?      size": the header
    head = glued.group(1) if glued and not header.startswith(" ") else header
    columns = re.split(r"\s{2,}", head.strip())
    rows = [lines[i] for i in best[1:]]
    widths = {len(re.split(r"\s{2,}", r.strip())) for r in rows}
    if max(widths) != len(columns) + 1 and not header.startswith(" "):
        return None  # not an index and the header's columns
    index = [re.split(r"\s{2,}", r.strip())[0] for r in rows]
    footer = _FOOTER_RE.search(text)
    total = (int(footer.group(1)), int(footer.group(2))) if footer else None
    return rows, columns, index, total


def _nested_shape(text: str) -> tuple[int, ...] | None:
    try:
        value = ast.literal_eval(re.sub(r"\s+", " ", text))
    except (ValueError, SyntaxError):
        return None
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        value = value[0] if value else None
    return tuple(shape)


def _literal(text: str) -> object | None:
    """A Python literal (a list, a dict …) the message ends with, if any."""
    for line in text.strip().splitlines()[-1:]:
        candidate = line.strip()[-2000:]
        for start in range(len(candidate)):
            if candidate[start] in "[{(-0123456789" and (start == 0 or candidate[start - 1] == " "):
                try:
                    return ast.literal_eval(candidate[start:])
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    continue
    return None
