"""The ``%memory`` grammar: one frozen args dataclass per subcommand, parsed from the line.

Each subcommand is declared once, as its typed args (``grammar``: the fields carry their
spelling); the parser, the typed values and the README's table all come from these
classes. :func:`parse_memory_line` turns a line into one of them (or ``None`` after
``--help``) and raises a one-line ``UsageError`` naming the fix for anything it cannot
read; ``memory_commands`` handles what it returns.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from ..schema.constants import CATEGORIES  # light: no pydantic, no journal
from .errors import usage_error
from .grammar import (
    HelpShown,
    Parser,
    build_parser,
    option,
    positional,
    split_line,
    switch,
    typed_args,
    words,
)

PROG = "%memory"
DESCRIPTION = (
    "View and change long-term memory. With no subcommand: the memory panel in a notebook, "
    "a text summary in a terminal."
)
EPILOG = (
    "Run %memory SUBCOMMAND --help for a subcommand's options. Ids and version numbers may "
    "name a notebook variable ({fid} or $fid); fact text is kept literally."
)
# The notebook's variables while a line is parsed, for ``{fid}`` and ``$v`` in ids.
_USER_NS: ContextVar[Mapping[str, Any] | None] = ContextVar("_USER_NS", default=None)


# -- value types (argparse calls them; ArgumentTypeError becomes the one-line error) --------
def unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text!r}")
    return value


def expanded(text: str) -> str:
    """An id, a version or a URL written as ``{expr}`` or ``$name``, read from the
    notebook's variables.

    Only ids, version numbers and URLs expand (their types call this): fact text and queries
    stay literal, since a ``$5`` or ``{braces}`` in a fact is text, not a variable. What
    does not evaluate is left as written, and the "no fact" error then shows it.
    """
    namespace = _USER_NS.get()
    if namespace is None or not text.startswith(("$", "{")):
        return text
    from IPython.utils.text import DollarFormatter

    try:
        return str(DollarFormatter().vformat(text, args=[], kwargs=namespace))
    except Exception:  # any error in the user's expression: as IPython's var_expand does
        return text


_MOST = 2**63 - 1  # the largest count SQLite takes


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return min(value, _MOST)  # more than any store holds means all: SQLite's LIMIT takes it


def number(text: str) -> int:
    """A version or pending-change number (``{v}`` and ``$v`` expand)."""
    return positive_int(expanded(text))


MAX_ITEM_NUMBER = 100_000  # past any change's items; a larger range would fill the memory


def item_numbers(text: str) -> tuple[int, ...]:
    """A pending change's item numbers: ``2``, ``1,3`` or ``2-5`` (``%memory pending``)."""
    numbers: dict[int, None] = {}
    for part in text.replace(" ", "").split(","):
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            first = last = 0
        if not 1 <= first <= last <= MAX_ITEM_NUMBER:
            raise argparse.ArgumentTypeError(
                f"must be item numbers such as 2, 1,3 or 2-5 (see %memory pending; at most "
                f"{MAX_ITEM_NUMBER:,}), got {text!r}"
            )
        numbers.update(dict.fromkeys(range(first, last + 1)))  # once each, in order
    return tuple(numbers)


def day_count(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value >= 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of days of at least 1, got {text!r}")
    return value


def iso_moment(text: str) -> str:
    from datetime import datetime

    try:
        datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a date like 2027-06-01 (or 2027-06-01T12:00), got {text!r}"
        ) from None
    return text.strip()


def _how_many() -> Any:
    return option("-k", default=10, type=positive_int, metavar="N", help="how many (10)")


# -- the subcommands --------------------------------------------------------------------
@dataclass(frozen=True)
class PanelArgs:
    command: ClassVar[str] = "panel"
    about: ClassVar[str] = "show the memory panel (ipywidgets)"


@dataclass(frozen=True)
class FactsArgs:
    command: ClassVar[str] = "facts"
    about: ClassVar[str] = "list facts as a table"
    category: str | None = option("--category", choices=CATEGORIES)
    min_confidence: float | None = option("--min-confidence", type=unit_float, metavar="X")
    sort: Literal["confidence", "created"] = option(
        "--sort", default="confidence", choices=("confidence", "created")
    )
    limit: int | None = option("--limit", type=positive_int, metavar="N", help="the first N")
    project: str | None = option("--project", metavar="NAME", help="only project NAME's facts")
    all: bool = switch("--all", help="every project's facts (default: yours and this project's)")
    user: bool = switch("--user", help="only your own facts, shared by every project")


@dataclass(frozen=True)
class SearchArgs:
    command: ClassVar[str] = "search"
    about: ClassVar[str] = "rank facts by relevance to QUERY, with scores"
    query: str = words("QUERY")
    k: int = _how_many()
    all: bool = switch("--all", help="in every project (default: yours and this project's)")


@dataclass(frozen=True)
class RecallArgs:
    command: ClassVar[str] = "recall"
    about: ClassVar[str] = "search past conversations (the journal) for QUERY"
    query: str = words("QUERY")
    k: int = _how_many()
    thread: str | None = option("--thread", "-t", metavar="T", help="only thread T")
    all: bool = switch("--all", help="in every project's threads (default: this project's)")


@dataclass(frozen=True)
class PreviewArgs:
    command: ClassVar[str] = "preview"
    about: ClassVar[str] = "show exactly the block the next turn would inject"
    context: str | None = option("--context", metavar="TEXT", help="the turn's text, for ranking")
    tokens: int | None = option("--tokens", type=positive_int, metavar="N", help="token budget")


@dataclass(frozen=True)
class AddArgs:
    command: ClassVar[str] = "add"
    about: ClassVar[str] = "add a fact by hand"
    text: str = words("TEXT")
    # None: read from the text (memory/updates/classify.py), "Prefers …" is a preference.
    category: str | None = option("--category", choices=CATEGORIES)
    confidence: float = option("--confidence", default=0.9, type=unit_float, metavar="X")
    # Neither: read from the text (a column, a metric, a file → this project's).
    project: bool = switch("--project", help="this project's fact")
    user: bool = switch("--user", help="your own fact, shared by every project")


@dataclass(frozen=True)
class EditArgs:
    command: ClassVar[str] = "edit"
    about: ClassVar[str] = "change a fact's text (or its category or confidence)"
    fact_id: str = positional("ID", type=expanded)
    text: str | None = words(
        "TEXT", required=False, empty="the new text is empty; give some words, or forget the fact"
    )
    category: str | None = option("--category", choices=CATEGORIES)
    confidence: float | None = option("--confidence", type=unit_float, metavar="X")


@dataclass(frozen=True)
class ForgetArgs:
    command: ClassVar[str] = "forget"
    about: ClassVar[str] = "remove facts by id, or by --match TEXT"
    ids: tuple[str, ...] = positional("ID", nargs="*", type=expanded)
    match: str | None = option(
        "--match", metavar="TEXT", help="forget the facts whose content matches"
    )
    yes: bool = switch("--yes", help="confirm when more than one matches")
    all: bool = switch("--all", help="--match in every project (default: yours and this project's)")


@dataclass(frozen=True)
class FlushArgs:
    command: ClassVar[str] = "flush"
    about: ClassVar[str] = "fold every pending conversation into memory now"


@dataclass(frozen=True)
class StatusArgs:
    command: ClassVar[str] = "status"
    about: ClassVar[str] = "queue rows, last fold, last error, file paths"


@dataclass(frozen=True)
class DoctorArgs:
    command: ClassVar[str] = "doctor"
    about: ClassVar[str] = "check the configured models (streams, tools, JSON, extraction)"


@dataclass(frozen=True)
class HistoryArgs:
    command: ClassVar[str] = "history"
    about: ClassVar[str] = "memory events, newest first (of one fact with ID), and who made each"
    fact_id: str | None = positional("ID", nargs="?", type=expanded)
    limit: int = option("--limit", default=50, type=positive_int, metavar="N")
    all: bool = switch("--all", help="every project's events (default: yours and this project's)")


@dataclass(frozen=True)
class VersionsArgs:
    command: ClassVar[str] = "versions"
    about: ClassVar[str] = "saved versions of memory.json"


@dataclass(frozen=True)
class DiffArgs:
    command: ClassVar[str] = "diff"
    about: ClassVar[str] = "what changed between versions V1 and V2 (default: now)"
    v1: int = positional("V1", type=number)
    v2: int | None = positional("V2", nargs="?", type=number)


@dataclass(frozen=True)
class RollbackArgs:
    command: ClassVar[str] = "rollback"
    about: ClassVar[str] = "restore memory as it was at version V"
    version: int = positional("V", type=number)


@dataclass(frozen=True)
class ReviewArgs:
    command: ClassVar[str] = "review"
    about: ClassVar[str] = "turn review mode on or off (folds wait for approval)"
    mode: Literal["on", "off"] | None = positional(nargs="?", choices=("on", "off"))


@dataclass(frozen=True)
class PendingArgs:
    command: ClassVar[str] = "pending"
    about: ClassVar[str] = "changes waiting for review"


@dataclass(frozen=True)
class ApproveArgs:
    command: ClassVar[str] = "approve"
    about: ClassVar[str] = "apply pending changes by id, or --all; --only N,M: some items of one"
    ids: tuple[int, ...] = positional("ID", nargs="*", type=number)
    all: bool = switch("--all")
    only: tuple[int, ...] | None = option(
        "--only",
        type=item_numbers,
        metavar="N,M",
        help="only these items of the one change ID (numbered in %memory pending)",
    )


@dataclass(frozen=True)
class RejectArgs:
    command: ClassVar[str] = "reject"
    about: ClassVar[str] = "drop pending changes by id, or --all; --only N,M: some items of one"
    ids: tuple[int, ...] = positional("ID", nargs="*", type=number)
    all: bool = switch("--all")
    only: tuple[int, ...] | None = option(
        "--only",
        type=item_numbers,
        metavar="N,M",
        help="only these items of the one change ID (numbered in %memory pending)",
    )


@dataclass(frozen=True)
class StaleArgs:
    command: ClassVar[str] = "stale"
    about: ClassVar[str] = (
        "list facts neither confirmed nor used for memory.staleness_days and propose their "
        "removal for review (goals and current activities age 3x faster)"
    )
    days: float | None = option(
        "--days", type=day_count, metavar="N", help="override memory.staleness_days"
    )
    as_of: str | None = option(
        "--as-of", type=iso_moment, metavar="DATE", help="judge as if it were DATE"
    )
    dry_run: bool = switch("--dry-run", help="list only, propose nothing")


@dataclass(frozen=True)
class ConsolidateArgs:
    command: ClassVar[str] = "consolidate"
    about: ClassVar[str] = (
        "ask the memory model to merge related facts (a pending change in review mode; "
        "undo with rollback)"
    )


@dataclass(frozen=True)
class ExportArgs:
    command: ClassVar[str] = "export"
    about: ClassVar[str] = (
        "write memory.json to PATH (--force overwrites a file; --project NAME: only that "
        "project's facts and summary)"
    )
    path: str = positional("PATH")
    force: bool = switch("--force")
    project: str | None = option("--project", metavar="NAME", help="only project NAME's part")


@dataclass(frozen=True)
class ImportArgs:
    command: ClassVar[str] = "import"
    about: ClassVar[str] = (
        "replace memory with PATH (a DeerFlow memory.json works; --yes when memory has facts); "
        "--project NAME adds PATH's facts to project NAME instead"
    )
    path: str = positional("PATH")
    yes: bool = switch("--yes")
    project: str | None = option(
        "--project", metavar="NAME", help="add the facts to project NAME, replacing nothing"
    )


@dataclass(frozen=True)
class ResetArgs:
    command: ClassVar[str] = "reset"
    about: ClassVar[str] = "empty memory (needs --yes; versions stay for rollback)"
    yes: bool = switch("--yes")


@dataclass(frozen=True)
class ProjectArgs:
    command: ClassVar[str] = "project"
    about: ClassVar[str] = (
        "show this notebook's project, switch to NAME, or --rename/--forget project NAME"
    )
    name: str | None = positional("NAME", nargs="?")
    rename: str | None = option("--rename", metavar="NEW", help="rename project NAME to NEW")
    forget: bool = switch("--forget", help="remove project NAME's facts and summary")
    review: bool = switch("--review", help="with --forget: wait in %memory pending")
    yes: bool = switch("--yes", help="with --forget: confirm")


@dataclass(frozen=True)
class ProjectsArgs:
    command: ClassVar[str] = "projects"
    about: ClassVar[str] = (
        "every project: its facts, threads, last use; a shared one's server and members"
    )


@dataclass(frozen=True)
class MoveArgs:
    command: ClassVar[str] = "move"
    about: ClassVar[str] = "move fact ID to your own facts (--user) or to a project"
    fact_id: str = positional("ID", type=expanded)
    user: bool = switch("--user", help="to your own facts, shared by every project")
    project: str | None = option("--project", metavar="NAME", help="to project NAME")


@dataclass(frozen=True)
class _SharedProjectArgs:
    """A shared project and its PostgreSQL (``share`` and ``join``)."""

    name: str = positional("NAME")
    url: str | None = option(
        "--url", metavar="URL", help="postgresql://ROLE@HOST:PORT/DATABASE", type=expanded
    )


@dataclass(frozen=True)
class ShareArgs(_SharedProjectArgs):
    command: ClassVar[str] = "share"
    about: ClassVar[str] = (
        "share project NAME with the team on PostgreSQL at --url (its facts are sent; the "
        "password in PGPASSWORD or ~/.pgpass, never stored)"
    )


@dataclass(frozen=True)
class JoinArgs(_SharedProjectArgs):
    command: ClassVar[str] = "join"
    about: ClassVar[str] = "join the team's project NAME on PostgreSQL at --url and pull its facts"


@dataclass(frozen=True)
class SyncArgs:
    command: ClassVar[str] = "sync"
    about: ClassVar[str] = "send changes to shared projects and apply the team's"


# Every subcommand, in the order --help and the README list them.
Args = (
    PanelArgs | FactsArgs | SearchArgs | RecallArgs | PreviewArgs | AddArgs | EditArgs
    | ForgetArgs | FlushArgs | StatusArgs | DoctorArgs | HistoryArgs | VersionsArgs | DiffArgs
    | RollbackArgs | ReviewArgs | PendingArgs | ApproveArgs | RejectArgs | StaleArgs
    | ConsolidateArgs | ExportArgs | ImportArgs | ResetArgs | ProjectArgs | ProjectsArgs
    | MoveArgs | ShareArgs | JoinArgs | SyncArgs
)  # fmt: skip
COMMANDS: tuple[type[Args], ...] = get_args(Args)
SUBCOMMANDS: tuple[str, ...] = tuple(cls.command for cls in COMMANDS)


# -- parsing ----------------------------------------------------------------------------
def build_parsers() -> tuple[Parser, dict[str, Parser]]:
    """``%memory``'s parser (for ``--help``, listing the subcommands) and each
    subcommand's own, built from its args class."""
    parser = Parser(prog=PROG, description=DESCRIPTION, epilog=EPILOG, add_help=False)
    sub = parser.add_subparsers(metavar="SUBCOMMAND", parser_class=Parser)
    parsers = {
        cls.command: build_parser(
            sub.add_parser(cls.command, help=cls.about, description=cls.about, add_help=False),
            cls,
        )
        for cls in COMMANDS
    }
    build_parser(parser, PanelArgs)  # only -h/--help: a bare %memory is the panel
    return parser, parsers


_PARSER, _SUBPARSERS = build_parsers()


def parse_memory_line(line: str, user_ns: Mapping[str, Any] | None = None) -> Args | None:
    """The typed args for one ``%memory`` line, or ``None`` when help was printed.

    With ``user_ns`` (the notebook's variables), ids and version numbers may be written as
    ``{expr}`` or ``$name``.
    """
    token = _USER_NS.set(user_ns)
    try:
        return _parse_words(split_line(line, PROG))
    except HelpShown:
        return None
    finally:
        _USER_NS.reset(token)


def _parse_words(words: list[str]) -> Args:
    if not words:
        return PanelArgs()
    if words[0].startswith("-"):
        _PARSER.parse_args(words)  # --help prints; anything else is an error
        return PanelArgs()
    parser = _SUBPARSERS.get(words[0])
    if parser is None:
        close = difflib.get_close_matches(words[0].lower(), SUBCOMMANDS, n=1, cutoff=0.6)
        hint = f"did you mean {PROG} {close[0]}? ({PROG} --help lists them)" if close else ""
        raise usage_error(f"unknown subcommand {words[0]!r}; {hint or f'run {PROG} --help'}")
    cls = COMMANDS[SUBCOMMANDS.index(words[0])]
    return typed_args(cls, parser.parse_args(words[1:]), parser.prog)
