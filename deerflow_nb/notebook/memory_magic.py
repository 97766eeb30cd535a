"""``%memory``: view, search, edit, forget, review and roll back long-term memory.

Parsing is kept apart from handling. :func:`parse_memory_line` turns the magic's line
into one frozen ``*Args`` dataclass per subcommand (or ``None`` after ``--help``), and
raises a one-line ``UsageError`` naming the fix for anything it cannot read. Handlers on
:class:`MemoryCommands` take those typed objects, validate ids against memory *before*
writing anything, and call only the public ``Memory`` API, so every change is journaled
and atomic exactly as it is for the agent, the panel and the inspector.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand

from ..config import ConfigError
from ..llm.base import ModelError
from . import memory_views as views
from .session import get_session

if TYPE_CHECKING:
    from ..doctor.report import DoctorReport
    from ..memory import Memory
    from .panel import MemoryPanel

# Mirrors memory.store.CATEGORIES: importing deerflow_nb.memory here would load the journal
# (sqlite-utils, and through it pandas) at %load_ext.
CATEGORIES = ("preference", "knowledge", "context", "behavior", "goal", "correction")
PROG = "%memory"
# The notebook's variables while a line is parsed, for ``{fid}`` and ``$v`` in ids.
_USER_NS: ContextVar[Mapping[str, Any] | None] = ContextVar("_USER_NS", default=None)


# -- typed arguments ----------------------------------------------------------------
@dataclass(frozen=True)
class PanelArgs:
    command: ClassVar[str] = "panel"


@dataclass(frozen=True)
class FactsArgs:
    command: ClassVar[str] = "facts"
    category: str | None = None
    min_confidence: float | None = None
    sort: Literal["confidence", "created"] = "confidence"


@dataclass(frozen=True)
class SearchArgs:
    command: ClassVar[str] = "search"
    query: str
    k: int = 10


@dataclass(frozen=True)
class RecallArgs:
    command: ClassVar[str] = "recall"
    query: str
    k: int = 10
    thread: str | None = None


@dataclass(frozen=True)
class PreviewArgs:
    command: ClassVar[str] = "preview"
    context: str | None = None
    tokens: int | None = None


@dataclass(frozen=True)
class AddArgs:
    command: ClassVar[str] = "add"
    text: str
    category: str = "context"
    confidence: float = 0.9


@dataclass(frozen=True)
class EditArgs:
    command: ClassVar[str] = "edit"
    fact_id: str
    text: str | None = None
    category: str | None = None
    confidence: float | None = None


@dataclass(frozen=True)
class ForgetArgs:
    command: ClassVar[str] = "forget"
    ids: tuple[str, ...] = ()
    match: str | None = None
    yes: bool = False


@dataclass(frozen=True)
class FlushArgs:
    command: ClassVar[str] = "flush"


@dataclass(frozen=True)
class StatusArgs:
    command: ClassVar[str] = "status"


@dataclass(frozen=True)
class DoctorArgs:
    command: ClassVar[str] = "doctor"


@dataclass(frozen=True)
class HistoryArgs:
    command: ClassVar[str] = "history"
    fact_id: str | None = None
    limit: int = 50


@dataclass(frozen=True)
class VersionsArgs:
    command: ClassVar[str] = "versions"


@dataclass(frozen=True)
class DiffArgs:
    command: ClassVar[str] = "diff"
    v1: int
    v2: int | None = None


@dataclass(frozen=True)
class RollbackArgs:
    command: ClassVar[str] = "rollback"
    version: int


@dataclass(frozen=True)
class ReviewArgs:
    command: ClassVar[str] = "review"
    mode: Literal["on", "off"] | None = None


@dataclass(frozen=True)
class PendingArgs:
    command: ClassVar[str] = "pending"


@dataclass(frozen=True)
class ApproveArgs:
    command: ClassVar[str] = "approve"
    ids: tuple[int, ...] = ()
    all: bool = False


@dataclass(frozen=True)
class RejectArgs:
    command: ClassVar[str] = "reject"
    ids: tuple[int, ...] = ()
    all: bool = False


@dataclass(frozen=True)
class ExportArgs:
    command: ClassVar[str] = "export"
    path: str
    force: bool = False


@dataclass(frozen=True)
class ImportArgs:
    command: ClassVar[str] = "import"
    path: str
    yes: bool = False


@dataclass(frozen=True)
class StaleArgs:
    command: ClassVar[str] = "stale"
    days: float | None = None
    as_of: str | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class ConsolidateArgs:
    command: ClassVar[str] = "consolidate"


@dataclass(frozen=True)
class ResetArgs:
    command: ClassVar[str] = "reset"
    yes: bool = False


Args = (
    PanelArgs | FactsArgs | SearchArgs | PreviewArgs | AddArgs | EditArgs | ForgetArgs
    | FlushArgs | StatusArgs | DoctorArgs | HistoryArgs | VersionsArgs | DiffArgs | RollbackArgs
    | ReviewArgs | PendingArgs | ApproveArgs | RejectArgs | ExportArgs | ImportArgs | ResetArgs
    | RecallArgs | StaleArgs | ConsolidateArgs
)  # fmt: skip


# -- parsing ------------------------------------------------------------------------
class _HelpShown(Exception):
    """argparse printed usage (``--help``); the magic returns nothing."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; run {self.prog} --help")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status:
            raise UsageError(f"{self.prog}: {(message or 'error').strip()}")
        raise _HelpShown


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text!r}")
    return value


def _expanded(text: str) -> str:
    """An id or version written as ``{expr}`` or ``$name``, read from the notebook's variables.

    Only ids and version numbers expand (their argparse types call this): fact text and
    queries stay literal, since a ``$5`` or ``{braces}`` in a fact is text, not a variable.
    What does not evaluate is left as written, and the "no fact" error then shows it.
    """
    namespace = _USER_NS.get()
    if namespace is None or not text.startswith(("$", "{")):
        return text
    from IPython.utils.text import DollarFormatter

    try:
        return str(DollarFormatter().vformat(text, args=[], kwargs=namespace))
    except Exception:  # any error in the user's expression: as IPython's var_expand does
        return text


def _fact_id(text: str) -> str:
    return _expanded(text)


def _number(text: str) -> int:
    """A version or pending-change number (``{v}`` and ``$v`` expand)."""
    return _positive_int(_expanded(text))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value >= 1 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of days of at least 1, got {text!r}")
    return value


def _moment(text: str) -> str:
    from datetime import datetime

    try:
        datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a date like 2027-06-01 (or 2027-06-01T12:00), got {text!r}"
        ) from None
    return text.strip()


def build_parser() -> argparse.ArgumentParser:
    """The ``%memory`` grammar: one sub-parser per subcommand, each tied to its Args class."""
    parser = _Parser(
        prog=PROG,
        description="View and change long-term memory. With no subcommand: the memory panel "
        "in a notebook, a text summary in a terminal.",
        epilog="Run %memory SUBCOMMAND --help for a subcommand's options. Ids and version "
        "numbers may name a notebook variable ({fid} or $fid); fact text is kept literally.",
    )
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", parser_class=_Parser)

    def add(name: str, cls: type, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(_args_cls=cls)
        return p

    add("panel", PanelArgs, "show the memory panel (ipywidgets)")
    p = add("facts", FactsArgs, "list facts as a table")
    p.add_argument("--category", choices=CATEGORIES)
    p.add_argument("--min-confidence", type=_unit_float, metavar="X")
    p.add_argument("--sort", choices=("confidence", "created"), default="confidence")
    p = add("search", SearchArgs, "rank facts by relevance to QUERY, with scores")
    p.add_argument("query", nargs="+", metavar="QUERY")
    p.add_argument("-k", type=_positive_int, default=10, metavar="N", help="how many (10)")
    p = add("recall", RecallArgs, "search past conversations (the journal) for QUERY")
    p.add_argument("query", nargs="+", metavar="QUERY")
    p.add_argument("-k", type=_positive_int, default=10, metavar="N", help="how many (10)")
    p.add_argument("--thread", "-t", metavar="T", help="only thread T")
    p = add("preview", PreviewArgs, "show exactly the block the next turn would inject")
    p.add_argument("--context", metavar="TEXT", help="the turn's text, for ranking")
    p.add_argument("--tokens", type=_positive_int, metavar="N", help="token budget")
    p = add("add", AddArgs, "add a fact by hand")
    p.add_argument("text", nargs="+", metavar="TEXT")
    p.add_argument("--category", choices=CATEGORIES, default="context")
    p.add_argument("--confidence", type=_unit_float, default=0.9, metavar="X")
    p = add("edit", EditArgs, "change a fact's text (or its category or confidence)")
    p.add_argument("fact_id", type=_fact_id, metavar="ID")
    p.add_argument("text", nargs="*", metavar="TEXT")
    p.add_argument("--category", choices=CATEGORIES)
    p.add_argument("--confidence", type=_unit_float, metavar="X")
    p = add("forget", ForgetArgs, "remove facts by id, or by --match TEXT")
    p.add_argument("ids", nargs="*", type=_fact_id, metavar="ID")
    p.add_argument("--match", metavar="TEXT", help="forget the facts whose content matches")
    p.add_argument("--yes", action="store_true", help="confirm when more than one matches")
    add("flush", FlushArgs, "fold every pending conversation into memory now")
    add("status", StatusArgs, "queue rows, last fold, last error, file paths")
    add("doctor", DoctorArgs, "check the configured models (streams, tools, JSON, extraction)")
    p = add("history", HistoryArgs, "memory events, newest first (of one fact with ID)")
    p.add_argument("fact_id", nargs="?", type=_fact_id, metavar="ID")
    p.add_argument("--limit", type=_positive_int, default=50, metavar="N")
    add("versions", VersionsArgs, "saved versions of memory.json")
    p = add("diff", DiffArgs, "what changed between versions V1 and V2 (default: now)")
    p.add_argument("v1", type=_number, metavar="V1")
    p.add_argument("v2", type=_number, nargs="?", metavar="V2")
    p = add("rollback", RollbackArgs, "restore memory as it was at version V")
    p.add_argument("version", type=_number, metavar="V")
    p = add("review", ReviewArgs, "turn review mode on or off (folds wait for approval)")
    p.add_argument("mode", nargs="?", choices=("on", "off"))
    add("pending", PendingArgs, "changes waiting for review")
    for name, cls, verb in (("approve", ApproveArgs, "apply"), ("reject", RejectArgs, "drop")):
        p = add(name, cls, f"{verb} pending changes by id, or --all")
        p.add_argument("ids", nargs="*", type=_number, metavar="ID")
        p.add_argument("--all", action="store_true")
    p = add(
        "stale",
        StaleArgs,
        "list facts neither confirmed nor used for memory.staleness_days and propose their "
        "removal for review (goals and current activities age 3x faster)",
    )
    p.add_argument("--days", type=_days, metavar="N", help="override memory.staleness_days")
    p.add_argument("--as-of", type=_moment, metavar="DATE", help="judge as if it were DATE")
    p.add_argument("--dry-run", action="store_true", help="list only, propose nothing")
    add(
        "consolidate",
        ConsolidateArgs,
        "ask the memory model to merge related facts (a pending change in review mode; "
        "undo with rollback)",
    )
    p = add("export", ExportArgs, "write memory.json to PATH (--force overwrites a file)")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--force", action="store_true")
    p = add(
        "import",
        ImportArgs,
        "replace memory with PATH (a DeerFlow memory.json works; --yes when memory has facts)",
    )
    p.add_argument("path", metavar="PATH")
    p.add_argument("--yes", action="store_true")
    p = add("reset", ResetArgs, "empty memory (needs --yes; versions stay for rollback)")
    p.add_argument("--yes", action="store_true")
    return parser


_PARSER = build_parser()
SUBCOMMANDS: tuple[str, ...] = tuple(
    next(a for a in _PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices
)


def split_line(line: str) -> list[str]:
    """Shell-like words; an unpaired apostrophe ("I'm") is read as a letter, not a quote."""
    try:
        return shlex.split(line)
    except ValueError:
        lexer = shlex.shlex(line, posix=True)
        lexer.whitespace_split = True
        lexer.quotes = '"'
        try:
            return list(lexer)
        except ValueError:
            raise UsageError(f'{PROG}: unbalanced quote; close the " in the line') from None


def parse_memory_line(line: str, user_ns: Mapping[str, Any] | None = None) -> Args | None:
    """The typed args for one ``%memory`` line, or ``None`` when help was printed.

    With ``user_ns`` (the notebook's variables), ids and version numbers may be written as
    ``{expr}`` or ``$name``.
    """
    token = _USER_NS.set(user_ns)
    try:
        return _parse_words(split_line(line))
    finally:
        _USER_NS.reset(token)


def _parse_words(words: list[str]) -> Args | None:
    if not words:
        return PanelArgs()
    if not words[0].startswith("-") and words[0] not in SUBCOMMANDS:
        raise UsageError(f"unknown subcommand {words[0]!r}; run {PROG} --help")
    try:
        ns, extra = _PARSER.parse_known_args(words)
    except _HelpShown:
        return None
    cls = getattr(ns, "_args_cls", None)
    prog = f"{PROG} {cls.command}" if cls is not None else PROG
    if extra:
        raise UsageError(f"{prog}: unrecognized arguments: {' '.join(extra)}; run {prog} --help")
    if cls is None:
        return PanelArgs()
    values: dict[str, Any] = {}
    for f in fields(cls):
        value = getattr(ns, f.name)
        if f.name in ("text", "query"):
            value = " ".join(value) if value else None
        elif isinstance(value, list):
            value = tuple(value)
        values[f.name] = value
    if cls is AddArgs or cls is SearchArgs or cls is RecallArgs:
        key = "text" if cls is AddArgs else "query"
        if not values[key].strip():
            raise UsageError(f"{PROG} {cls.command}: {key} is empty; give some words")
    if cls is EditArgs and values["text"] is not None and not values["text"].strip():
        raise UsageError(f"{PROG} edit: the new text is empty; give some words, or forget the fact")
    return cls(**values)


# -- handling -----------------------------------------------------------------------
def _no_fact(fact_id: str) -> str:
    if fact_id.startswith(("$", "{")):  # an expansion that did not evaluate
        return (
            f"no fact {fact_id!r}: no notebook variable of that name holds an id; see {PROG} facts"
        )
    return f"no fact {fact_id!r}; see {PROG} facts"


def in_notebook_kernel(shell: Any) -> bool:
    """True inside a Jupyter kernel, where widgets can render."""
    return (
        type(shell).__name__ == "ZMQInteractiveShell" or getattr(shell, "kernel", None) is not None
    )


class MemoryCommands:
    """One handler per subcommand; each validates, calls the Memory API, returns a view."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def run(self, args: Args) -> Any:
        return getattr(self, f"handle_{args.command}")(args)

    # validation, always before any write
    def _fact_ids(self) -> set[str]:
        return {f["id"] for f in self.memory.data.get("facts", [])}

    @staticmethod
    @contextmanager
    def _known_facts() -> Iterator[None]:
        """Memory checks ids under its lock before writing anything; say which one is unknown."""
        try:
            yield
        except KeyError as exc:
            raise UsageError(_no_fact(exc.args[0])) from None

    def _require_version(self, version: int) -> None:
        if version not in {v["id"] for v in self.memory.versions()}:
            raise UsageError(f"no version {version}; see {PROG} versions")

    def _require_pending(self, args: ApproveArgs | RejectArgs) -> list[int] | str:
        if args.all and args.ids:
            raise UsageError(f"{PROG} {args.command}: give ids or --all, not both")
        if args.all:
            return "all"
        if not args.ids:
            raise UsageError(
                f"{PROG} {args.command}: give pending ids or --all; see {PROG} pending"
            )
        known = {p["id"] for p in self.memory.pending()}
        for pid in args.ids:
            if pid not in known:
                raise UsageError(f"no pending change {pid}; see {PROG} pending")
        return list(args.ids)

    # read-only views
    def handle_panel(self, args: PanelArgs) -> MemoryPanel:
        from .panel import MemoryPanel

        return MemoryPanel(self.memory)

    def summary(self) -> views.SummaryView:
        return views.SummaryView(self.memory.data, self.memory.status())

    def handle_facts(self, args: FactsArgs) -> views.FactsTable:
        facts = self.memory.facts(
            category=args.category, min_confidence=args.min_confidence, sort=args.sort
        )
        return views.facts_view(facts)

    def handle_search(self, args: SearchArgs) -> views.SearchResults:
        return views.SearchResults(args.query, tuple(self.memory.search(args.query, k=args.k)))

    def handle_recall(self, args: RecallArgs) -> views.RecallResults:
        if args.thread is not None and self.memory.journal.thread(args.thread) is None:
            raise UsageError(f"{PROG} recall: no thread {args.thread!r} in the journal")
        results = self.memory.recall(args.query, k=args.k, thread=args.thread)
        return views.RecallResults(args.query, tuple(results), args.thread)

    def handle_preview(self, args: PreviewArgs) -> views.PreviewView:
        return views.preview_view(self.memory, args.context, args.tokens)

    def handle_status(self, args: StatusArgs) -> views.StatusView:
        return views.StatusView(self.memory.status())

    def handle_doctor(self, args: DoctorArgs) -> DoctorReport:
        from ..doctor.checks import run_doctor

        return run_doctor(self.memory.settings)  # an unreachable server: a one-line ModelError

    def handle_history(self, args: HistoryArgs) -> views.EventsView:
        if args.fact_id is None:
            folds = tuple(self.memory.folds(limit=min(args.limit, 10)))
            return views.EventsView(tuple(self.memory.events(limit=args.limit)), folds=folds)
        events = self.memory.history(args.fact_id)
        if not events and args.fact_id not in self._fact_ids():
            raise UsageError(_no_fact(args.fact_id))
        return views.EventsView(
            tuple(events[: args.limit]), f"History of {args.fact_id}, oldest first"
        )

    def handle_versions(self, args: VersionsArgs) -> views.VersionsView:
        return views.VersionsView(tuple(self.memory.versions()))

    def handle_diff(self, args: DiffArgs) -> views.DiffView:
        self._require_version(args.v1)
        if args.v2 is not None:
            self._require_version(args.v2)
        title = f"Diff v{args.v1} → " + (f"v{args.v2}" if args.v2 is not None else "now")
        return views.DiffView(title, self.memory.diff(args.v1, args.v2))

    def handle_pending(self, args: PendingArgs) -> views.PendingView:
        return views.PendingView(tuple(self.memory.pending()), bool(self.memory.review))

    # writes
    def handle_add(self, args: AddArgs) -> views.Notice:
        from ..memory.updater import MAX_FACT_CHARS

        before = self._fact_ids()
        try:
            fact = self.memory.add_fact(
                args.text, category=args.category, confidence=args.confidence
            )
        except ValueError as exc:  # memory is full of more confident facts
            raise UsageError(f"{PROG} add: {exc}") from None
        if fact.get("id") in before:  # a near-duplicate: the stored fact was reinforced
            note = f"Reinforced the near-duplicate {_describe(fact)}; change it with {PROG} edit"
        else:
            note = f"Added {_describe(fact)}"
        if len(" ".join(args.text.split())) > MAX_FACT_CHARS:
            note += f" (shortened to {MAX_FACT_CHARS} characters: a fact is one short line)"
        return views.Notice(note)

    def handle_edit(self, args: EditArgs) -> views.Notice:
        if args.text is None and args.category is None and args.confidence is None:
            raise UsageError(f"{PROG} edit: give new TEXT, --category or --confidence")
        with self._known_facts():
            fact = self.memory.edit_fact(
                args.fact_id, args.text, category=args.category, confidence=args.confidence
            )
        return views.Notice(f"Edited {_describe(fact)}")

    def handle_forget(self, args: ForgetArgs) -> views.Notice:
        if args.ids and args.match is not None:
            raise UsageError(f"{PROG} forget: give fact ids or --match TEXT, not both")
        if args.match is not None:
            matches = self.memory.forget_matching(args.match)
            if not matches:
                raise UsageError(f"no fact matches {args.match!r}; see {PROG} facts")
            if len(matches) > 1 and not args.yes:
                from IPython.display import display

                display(views.facts_view(matches, f"Facts matching {args.match!r}"))
                raise UsageError(
                    f"{len(matches)} facts match {args.match!r}; add --yes to forget them all"
                )
            ids = [f["id"] for f in matches]
        elif args.ids:
            ids = list(dict.fromkeys(args.ids))
        else:
            raise UsageError(f"{PROG} forget: give fact ids or --match TEXT; see {PROG} facts")
        with self._known_facts():
            removed = self.memory.forget_many(ids)
        noun = "fact" if len(removed) == 1 else "facts"
        return views.Notice(f"Forgot {len(removed)} {noun}", tuple(map(_describe, removed)))

    def handle_flush(self, args: FlushArgs) -> views.Notice:
        return views.Notice(views.flush_summary(self.memory.flush()))

    def handle_rollback(self, args: RollbackArgs) -> views.Notice:
        self._require_version(args.version)
        self.memory.rollback(args.version)
        count = len(self.memory.data.get("facts", []))
        return views.Notice(
            f"Rolled back to version {args.version} ({views.count_of(count, 'fact')})"
        )

    def handle_review(self, args: ReviewArgs) -> views.Notice:
        if args.mode is not None:
            self.memory.review = args.mode == "on"
        state = "on" if self.memory.review else "off"
        hint = f": folds wait in {PROG} pending" if state == "on" else ": folds apply directly"
        return views.Notice(f"Review mode {state}{hint}")

    def handle_approve(self, args: ApproveArgs) -> views.Notice:
        count = self.memory.approve(self._require_pending(args))
        return views.Notice(f"Approved {count} pending change{'s' * (count != 1)}")

    def handle_reject(self, args: RejectArgs) -> views.Notice:
        count = self.memory.reject(self._require_pending(args))
        return views.Notice(f"Rejected {count} pending change{'s' * (count != 1)}")

    def handle_export(self, args: ExportArgs) -> views.Notice:
        try:
            path = self.memory.export(Path(args.path).expanduser(), overwrite=args.force)
        except ValueError as exc:
            raise UsageError(f"{PROG} export: {exc}") from None
        count = len(self.memory.data.get("facts", []))
        return views.Notice(f"Exported {views.count_of(count, 'fact')} to {path}")

    def handle_import(self, args: ImportArgs) -> views.Notice:
        path = Path(args.path).expanduser()
        if not path.is_file():
            raise UsageError(f"no file {str(path)!r}; give the path of a memory.json")
        try:
            self.memory.read_import(path)  # a broken file is said before any confirmation
            held = len(self.memory.data.get("facts", []))
            if held and not args.yes:
                replaced = views.count_of(held, "fact")
                raise UsageError(
                    f"import replaces the {replaced} in memory; run {PROG} import "
                    f"{args.path} --yes to confirm (versions keep the current state for rollback)"
                )
            count = self.memory.import_(path)
        except ValueError as exc:  # json.JSONDecodeError included
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise UsageError(
                first if "cannot import" in first else f"cannot import: {first}"
            ) from None
        return views.Notice(f"Imported {views.count_of(count, 'fact')} from {path}")

    def handle_stale(self, args: StaleArgs) -> views.StaleView:
        days = args.days or self.memory.settings.memory.staleness_days
        if args.dry_run:
            return views.StaleView(tuple(self.memory.stale(args.as_of, days)), days)
        report = self.memory.propose_stale(args.as_of, days)
        return views.StaleView(
            tuple(report.stale), days, report.pending_id, tuple(report.already_pending), True
        )

    def handle_consolidate(self, args: ConsolidateArgs) -> views.ConsolidationView:
        before = [v["id"] for v in self.memory.versions()]
        report = self.memory.consolidate()
        return views.ConsolidationView(
            tuple(report.merges),
            tuple(report.merged),
            tuple(report.left_out),
            report.version,
            report.pending_id,
            tuple(self.memory.data.get("facts", [])) if report.pending_id else (),
            before[-1] if before and report.version is not None else None,
        )

    def handle_reset(self, args: ResetArgs) -> views.Notice:
        if not args.yes:
            raise UsageError(f"reset empties memory; run {PROG} reset --yes to confirm")
        self.memory.reset()
        return views.Notice(f"Memory reset; {PROG} versions keeps earlier states for rollback")


def _describe(fact: dict[str, Any]) -> str:
    conf = fact.get("confidence")
    conf_text = f", {conf:.2f}" if isinstance(conf, int | float) else ""
    return f"{fact.get('id')} ({fact.get('category')}{conf_text}): {fact.get('content')}"


@magics_class
class MemoryMagics(Magics):
    """``%memory``: the notebook's window onto long-term memory."""

    _panel: MemoryPanel | None = None

    def _new_panel(self, commands: MemoryCommands, args: PanelArgs) -> MemoryPanel:
        """A new panel; the one shown before is closed, as a re-run cell would otherwise
        leave it redrawing, unseen, on every change."""
        panel = commands.run(args)
        if self._panel is not None:
            self._panel.close()
        self._panel = panel
        return panel

    @no_var_expand
    @line_magic
    def memory(self, line: str = "") -> Any:
        """View and change long-term memory; run ``%memory --help`` for the subcommands."""
        args = parse_memory_line(line, self.shell.user_ns)
        if args is None:
            return None
        try:
            commands = MemoryCommands(get_session(self.shell).memory)
        except ConfigError as exc:  # a config.yaml typo: name the key and the file, once
            raise UsageError(str(exc)) from None
        from ..memory import MemoryFileError  # loaded with the session's Memory

        try:
            if isinstance(args, PanelArgs):
                if line.strip() or in_notebook_kernel(self.shell):
                    return self._new_panel(commands, args)
                return commands.summary()
            return commands.run(args)
        except (MemoryFileError, ConfigError, ModelError) as exc:  # memory.json, a setting
            raise UsageError(str(exc)) from None  # first used now: say how to fix it, once
