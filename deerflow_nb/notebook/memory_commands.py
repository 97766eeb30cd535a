"""``%memory``'s handlers: one per subcommand, from its typed args to the view it returns.

Each handler validates ids against memory *before* writing anything and calls only the
public ``Memory`` API, so every change is journaled and atomic exactly as it is for the
agent, the panel and the inspector. A problem the user can fix is a one-line
``UsageError`` naming the fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..memory import Scope
from .memory_args import (
    PROG,
    AddArgs,
    ApproveArgs,
    Args,
    ConsolidateArgs,
    DiffArgs,
    DoctorArgs,
    EditArgs,
    ExportArgs,
    FactsArgs,
    FlushArgs,
    ForgetArgs,
    HistoryArgs,
    ImportArgs,
    PanelArgs,
    PendingArgs,
    PreviewArgs,
    RecallArgs,
    RejectArgs,
    ResetArgs,
    ReviewArgs,
    RollbackArgs,
    SearchArgs,
    StaleArgs,
    StatusArgs,
    VersionsArgs,
)
from .project_commands import ProjectCommands
from .team_commands import TeamCommands
from .views.facts import FactsTable, PreviewView, SearchResults, facts_view, preview_view
from .views.history import DiffView, EventsView, VersionsView
from .views.recall import RecallResults
from .views.review import ConsolidationView, PendingView, StaleView
from .views.status import StatusView, SummaryView, flush_summary
from .views.table import Notice, count_of

if TYPE_CHECKING:
    from ..doctor.report import DoctorReport
    from ..memory import Memory
    from .panel import MemoryPanel
    from .session import Session


def _no_fact(fact_id: str) -> str:
    if fact_id.startswith(("$", "{")):  # an expansion that did not evaluate
        return (
            f"no fact {fact_id!r}: no notebook variable of that name holds an id; see {PROG} facts"
        )
    return f"no fact {fact_id!r}; see {PROG} facts"


class MemoryCommands(ProjectCommands, TeamCommands):
    """One handler per subcommand; each validates, calls the Memory API, returns a view."""

    def __init__(self, memory: Memory, session: Session | None = None) -> None:
        self.memory = memory
        self.session = session  # the notebook's: its project (``%memory project``)

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

        return MemoryPanel(self.memory, project=lambda: self.here)

    def _status(self) -> dict[str, Any]:
        """Memory's status and the notebook's project (None: the user's facts only)."""
        return {**self.memory.status(), "project": self.here}

    def summary(self) -> SummaryView:
        return SummaryView(self.memory.data, self._status())

    def handle_facts(self, args: FactsArgs) -> FactsTable:
        return self.facts_in_scope(args)

    def handle_search(self, args: SearchArgs) -> SearchResults:
        scope = {"project": self.here, "everywhere": args.all}
        results = tuple(self.memory.search(args.query, k=args.k, **scope))
        nearest = None
        if not results and args.query.strip():
            miss = self.memory.search(args.query, k=1, relevant_only=False, **scope)
            nearest = miss[0][0] if miss else None
        return SearchResults(args.query, results, nearest)

    def handle_recall(self, args: RecallArgs) -> RecallResults:
        if args.thread is not None and self.memory.reader.thread(args.thread) is None:
            raise UsageError(f"{PROG} recall: no thread {args.thread!r} in the journal")
        scope = {"project": self.here, "everywhere": args.all}
        results = self.memory.recall(args.query, k=args.k, thread=args.thread, **scope)
        nearest = None
        if not results:
            miss = self.memory.recall(
                args.query, k=1, thread=args.thread, relevant_only=False, **scope
            )
            nearest = miss[0] if miss else None
        return RecallResults(args.query, tuple(results), args.thread, nearest=nearest)

    def handle_preview(self, args: PreviewArgs) -> PreviewView:
        return preview_view(self.memory, args.context, args.tokens, project=self.here)

    def handle_status(self, args: StatusArgs) -> StatusView:
        return StatusView(self._status())

    def handle_doctor(self, args: DoctorArgs) -> DoctorReport:
        from ..doctor.checks import run_doctor

        return run_doctor(self.memory.settings)  # an unreachable server: a one-line ModelError

    def handle_history(self, args: HistoryArgs) -> EventsView:
        # Yours and this project's events, as search and forget --match see facts.
        scope = Scope.everywhere() if args.all else Scope.of(self.here)
        if args.fact_id is None:
            folds = tuple(self.memory.history.folds(limit=min(args.limit, 10), scope=scope))
            events = tuple(self.memory.events(limit=args.limit, scope=scope))
            title = "Memory events of every project" if args.all else "Memory events"
            return EventsView(events, title, folds=folds, projects=args.all)
        events = self.memory.history.of(args.fact_id, scope=scope)
        seen = {f["id"] for f in self.memory.facts.list(sort="none", scope=scope)}
        if args.fact_id not in seen:  # stored in another project, or gone
            if args.fact_id in self._fact_ids() or (
                not events and self.memory.history.of(args.fact_id)
            ):
                raise UsageError(
                    f"{PROG} history: fact {args.fact_id!r} is another project's; to see "
                    f"it, run {PROG} history {args.fact_id} --all"
                )
            if not events:
                raise UsageError(_no_fact(args.fact_id))
        title = f"History of {args.fact_id}, oldest first"
        return EventsView(tuple(events[: args.limit]), title, projects=args.all)

    def handle_versions(self, args: VersionsArgs) -> VersionsView:
        return VersionsView(tuple(self.memory.versions()))

    def handle_diff(self, args: DiffArgs) -> DiffView:
        self._require_version(args.v1)
        if args.v2 is not None:
            self._require_version(args.v2)
        title = f"Diff v{args.v1} → " + (f"v{args.v2}" if args.v2 is not None else "now")
        return DiffView(title, self.memory.history.diff(args.v1, args.v2))

    def handle_pending(self, args: PendingArgs) -> PendingView:
        pending = tuple(self.memory.pending())
        items = {p["id"]: tuple(self.memory.review.items(p)) for p in pending}
        return PendingView(pending, bool(self.memory.review.enabled), items)

    # writes
    def handle_add(self, args: AddArgs) -> Notice:
        from ..memory import MAX_FACT_CHARS

        before = self._fact_ids()
        try:
            fact = self.memory.add_fact(
                args.text,
                category=args.category,
                confidence=args.confidence,
                project=self.add_project(args),
            )
        except ValueError as exc:  # memory is full of more confident facts
            raise UsageError(f"{PROG} add: {exc}") from None
        if fact.get("id") in before:  # a near-duplicate: the stored fact was reinforced
            note = f"Reinforced the near-duplicate {_describe(fact)}; change it with {PROG} edit"
        else:
            note = f"Added {_describe(fact)}{self.scope_words(fact)}"
        if len(" ".join(args.text.split())) > MAX_FACT_CHARS:
            note += f" (shortened to {MAX_FACT_CHARS} characters: a fact is one short line)"
        return Notice(note)

    def handle_edit(self, args: EditArgs) -> Notice:
        if args.text is None and args.category is None and args.confidence is None:
            raise UsageError(f"{PROG} edit: give new TEXT, --category or --confidence")
        with self._known_facts():
            fact = self.memory.facts.edit(
                args.fact_id, args.text, category=args.category, confidence=args.confidence
            )
        return Notice(f"Edited {_describe(fact)}")

    def handle_forget(self, args: ForgetArgs) -> Notice:
        if args.ids and args.match is not None:
            raise UsageError(f"{PROG} forget: give fact ids or --match TEXT, not both")
        if args.match is not None and not args.match.strip():
            raise UsageError(f"{PROG} forget --match: give the text to match, e.g. --match pandas")
        if args.match is not None:
            matches = self.memory.facts.matching(args.match, project=self.here, everywhere=args.all)
            if not matches:
                mine = f"yours or project {self.here}'s" if self.here else "yours"
                where = "" if args.all else f" among {mine} (--all: in every project)"
                raise UsageError(f"no fact matches {args.match!r}{where}; see {PROG} facts")
            if len(matches) > 1 and not args.yes:
                from IPython.display import display

                display(facts_view(matches, f"Facts matching {args.match!r}"))
                raise UsageError(
                    f"{len(matches)} facts match {args.match!r}; add --yes to forget them all"
                )
            ids = [f["id"] for f in matches]
        elif args.ids:
            ids = list(dict.fromkeys(args.ids))
        else:
            raise UsageError(f"{PROG} forget: give fact ids or --match TEXT; see {PROG} facts")
        with self._known_facts():
            removed = self.memory.facts.forget_many(ids)
        noun = "fact" if len(removed) == 1 else "facts"
        return Notice(f"Forgot {len(removed)} {noun}", tuple(map(_describe, removed)))

    def handle_flush(self, args: FlushArgs) -> Notice:
        return Notice(flush_summary(self.memory.flush()))

    def handle_rollback(self, args: RollbackArgs) -> Notice:
        self._require_version(args.version)
        try:
            self.memory.rollback(args.version)
        except ValueError as exc:  # a project renamed since: its threads moved with it
            raise UsageError(str(exc)) from None
        count = len(self.memory.data.get("facts", []))
        return Notice(f"Rolled back to version {args.version} ({count_of(count, 'fact')})")

    def handle_review(self, args: ReviewArgs) -> Notice:
        if args.mode is not None:
            self.memory.review.enabled = args.mode == "on"
        state = "on" if self.memory.review.enabled else "off"
        hint = f": folds wait in {PROG} pending" if state == "on" else ": folds apply directly"
        return Notice(f"Review mode {state}{hint}")

    def handle_approve(self, args: ApproveArgs) -> Notice:
        if args.only is not None:
            return self._decide_items(args, self.memory.review.approve_items, "Approved")
        count = self.memory.approve(self._require_pending(args))
        return Notice(f"Approved {count} pending change{'s' * (count != 1)}")

    def handle_reject(self, args: RejectArgs) -> Notice:
        if args.only is not None:
            return self._decide_items(args, self.memory.review.reject_items, "Rejected")
        count = self.memory.review.reject(self._require_pending(args))
        return Notice(f"Rejected {count} pending change{'s' * (count != 1)}")

    def _decide_items(self, args: ApproveArgs | RejectArgs, decide: Any, done: str) -> Notice:
        """``--only N,M``: some items of one change; the rest keeps waiting, same numbers."""
        ids = self._require_pending(args)
        if ids == "all" or len(ids) != 1:
            raise UsageError(
                f"{PROG} {args.command} --only picks items of one change: give one ID, "
                f"e.g. {PROG} {args.command} 3 --only 1,2"
            )
        try:
            count = decide(ids[0], args.only or ())
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if count == 0:
            return Notice(f"Nothing {done.lower()}: change {ids[0]} was decided meanwhile")
        left = next((p for p in self.memory.pending() if p["id"] == ids[0]), None)
        rest = [item.line() for item in self.memory.review.items(left)] if left else []
        note = f"; {count_of(len(rest), 'item')} of it still waiting" if rest else ""
        return Notice(f"{done} {count_of(count, 'item')} of change {ids[0]}{note}", tuple(rest))

    def handle_export(self, args: ExportArgs) -> Notice:
        if args.project is not None:
            return self.export_project(args)
        try:
            path = self.memory.export(Path(args.path).expanduser(), overwrite=args.force)
        except ValueError as exc:
            raise UsageError(f"{PROG} export: {exc}") from None
        count = len(self.memory.data.get("facts", []))
        return Notice(f"Exported {count_of(count, 'fact')} to {path}")

    def handle_import(self, args: ImportArgs) -> Notice:
        path = Path(args.path).expanduser()
        if not path.is_file():
            raise UsageError(f"no file {str(path)!r}; give the path of a memory.json")
        if args.project is not None:
            return self.import_project(args)
        try:
            self.memory.transfer.read_import(path)  # a broken file is said before any confirmation
            held = len(self.memory.data.get("facts", []))
            if held and not args.yes:
                replaced = count_of(held, "fact")
                raise UsageError(
                    f"import replaces the {replaced} in memory; run {PROG} import "
                    f"{args.path} --yes to confirm (versions keep the current state for rollback)"
                )
            report = self.memory.import_(path)
        except ValueError as exc:  # json.JSONDecodeError included
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise UsageError(
                first if "cannot import" in first else f"cannot import: {first}"
            ) from None
        return Notice(report.describe(f"from {path}"))

    def handle_stale(self, args: StaleArgs) -> StaleView:
        days = args.days or self.memory.settings.memory.staleness_days
        if args.dry_run:
            return StaleView(tuple(self.memory.stale(args.as_of, days)), days)
        try:
            report = self.memory.propose_stale(args.as_of, days)
        except ValueError as exc:  # another kernel kept proposing the same facts
            raise UsageError(f"{PROG} stale: {exc}") from None
        return StaleView(
            tuple(report.stale),
            days,
            report.pending_id,
            tuple(report.already_pending),
            True,
            tuple(report.projects),
        )

    def handle_consolidate(self, args: ConsolidateArgs) -> ConsolidationView:
        before = [v["id"] for v in self.memory.versions()]
        report = self.memory.consolidate()
        return ConsolidationView(
            tuple(report.merges),
            tuple(report.merged),
            tuple(report.left_out),
            report.version,
            report.pending_id,
            tuple(self.memory.data.get("facts", [])) if report.pending_id else (),
            before[-1] if before and report.version is not None else None,
        )

    def handle_reset(self, args: ResetArgs) -> Notice:
        if not args.yes:
            raise UsageError(f"reset empties memory; run {PROG} reset --yes to confirm")
        self.memory.transfer.reset()
        return Notice(f"Memory reset; {PROG} versions keeps earlier states for rollback")


def _describe(fact: dict[str, Any]) -> str:
    conf = fact.get("confidence")
    conf_text = f", {conf:.2f}" if isinstance(conf, int | float) else ""
    return f"{fact.get('id')} ({fact.get('category')}{conf_text}): {fact.get('content')}"
