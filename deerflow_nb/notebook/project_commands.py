"""``%memory``'s project handlers: the notebook's project, the list, moves, renames, forgets.

Every change goes through the ``Memory`` API and so the gate; names and ids are checked
before anything is written, and a problem is a one-line ``UsageError`` naming the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..memory import Scope
from ..projects import fact_project, looks_like_project
from .memory_args import (
    PROG,
    AddArgs,
    ExportArgs,
    FactsArgs,
    ImportArgs,
    MoveArgs,
    ProjectArgs,
    ProjectsArgs,
)
from .views.facts import FactsTable, facts_view
from .views.projects import ProjectsTable
from .views.table import Notice, count_of

if TYPE_CHECKING:
    from ..memory import Memory
    from .session import Session


class ProjectCommands:
    """The project half of ``MemoryCommands`` (it holds ``memory`` and ``session``)."""

    memory: Memory
    session: Session | None

    @property
    def here(self) -> str | None:
        """The notebook's project (the session's UI state), passed to memory on each call;
        None without a notebook: the user's facts only."""
        return self.session.project.name if self.session is not None else None

    def _project_name(self, name: str) -> str:
        """A project name the user typed, by the one rule (``check_project_name``)."""
        from ..projects import check_project_name

        try:
            return check_project_name(name)
        except ValueError as exc:
            raise UsageError(f"{PROG} project: {exc}") from None

    def _known_project(self, name: str) -> str:
        known = [p["name"] for p in self.memory.projects.list()]
        if name not in known:
            listed = ", ".join(known) or "none yet"
            raise UsageError(f"no project {name!r} (known: {listed}); see {PROG} projects")
        return name

    def handle_project(self, args: ProjectArgs) -> Notice:
        if args.rename is not None or args.forget:
            if args.name is None:
                raise UsageError(
                    f"{PROG} project: name the project, e.g. {PROG} project old --forget"
                )
            if args.rename is not None and args.forget:
                raise UsageError(f"{PROG} project: --rename or --forget, not both")
            name = self._known_project(args.name)
            return self._rename(name, args.rename) if args.rename else self._forget(name, args)
        if args.name is not None:
            if self.session is None:
                raise UsageError(f"{PROG} project: only a notebook has a project to switch")
            try:
                self.session.set_project(args.name)
            except ValueError as exc:
                raise UsageError(f"{PROG} project: {exc}") from None
            return Notice(f"This notebook is now in project {self.here}")
        found = self.session.project.describe() if self.session else None
        return Notice(
            f"This notebook is in project {found or 'none'}; {PROG} project NAME switches"
        )

    def _rename(self, name: str, new: str) -> Notice:
        new = self._project_name(new)
        try:
            moved = self.memory.projects.rename(name, new)
        except ValueError as exc:
            raise UsageError(f"{PROG} project: {exc}") from None
        if self.session is not None and self.here == name:
            self.session.set_project(new)
        return Notice(
            f"Renamed project {name} to {new} ({count_of(moved, 'fact')} moved); notebooks "
            f"whose git root or folder is named {name} open in project {new} from now on"
        )

    def _forget(self, name: str, args: ProjectArgs) -> Notice:
        facts = self.memory.projects.facts(name)
        if not args.yes and not args.review:
            from IPython.display import display

            display(facts_view(facts, f"Facts of project {name}"))
            raise UsageError(
                f"forgetting project {name} removes its {count_of(len(facts), 'fact')} and "
                f"summary; add --yes to confirm, or --review to decide in {PROG} pending"
            )
        try:
            done = self.memory.projects.forget(name, review=args.review)
        except KeyError:
            raise UsageError(f"project {name} has no facts or summary to forget") from None
        except ValueError as exc:
            raise UsageError(f"{PROG} project: {exc}") from None
        if done["pending_id"] is not None:
            return Notice(
                f"Forgetting project {name} waits as pending change {done['pending_id']}; "
                f"see {PROG} pending"
            )
        return Notice(
            f"Forgot project {name}: {count_of(len(done['facts']), 'fact')} "
            f"(undo with {PROG} rollback; its threads stay in the journal)"
        )

    def export_project(self, args: ExportArgs) -> Notice:
        """``%memory export PATH --project NAME``: that project's facts and summary only."""
        from pathlib import Path

        name = self._known_project(self._project_name(args.project or ""))
        try:
            path = self.memory.export(
                Path(args.path).expanduser(), overwrite=args.force, project=name
            )
        except ValueError as exc:
            raise UsageError(f"{PROG} export: {exc}") from None
        count = len(self.memory.projects.facts(name))
        return Notice(f"Exported project {name}'s {count_of(count, 'fact')} to {path}")

    def import_project(self, args: ImportArgs) -> Notice:
        """``%memory import PATH --project NAME``: PATH's facts added to project NAME (one
        change, rolled back as one); nothing of memory is replaced, so no --yes."""
        from pathlib import Path

        name = self._project_name(args.project or "")
        path = Path(args.path).expanduser()
        try:
            report = self.memory.import_(path, project=name)
        except ValueError as exc:  # json.JSONDecodeError and the gate's Refused included
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise UsageError(
                first if "cannot import" in first else f"cannot import: {first}"
            ) from None
        return Notice(report.describe(f"into project {name} from {path}"))

    def handle_projects(self, args: ProjectsArgs) -> ProjectsTable:
        shared = self.memory.team.projects()  # kept in journal.db: offline too
        return ProjectsTable(tuple(self.memory.projects.list()), self.here, shared)

    def handle_move(self, args: MoveArgs) -> Notice:
        if args.user == (args.project is not None):
            raise UsageError(f"{PROG} move: give --user or --project NAME")
        try:
            if args.user:
                fact = self.memory.facts.edit(args.fact_id, scope="user")
            else:
                project = self._project_name(args.project or "")
                fact = self.memory.facts.edit(args.fact_id, scope="project", project=project)
        except KeyError:
            raise UsageError(f"no fact {args.fact_id!r}; see {PROG} facts --all") from None
        owner = fact_project(fact)
        where = f"project {owner}" if owner else "your own facts"
        return Notice(f"Moved {fact.get('id')} to {where}: {fact.get('content')}")

    def facts_in_scope(self, args: FactsArgs) -> FactsTable:
        """``%memory facts``: yours and this project's, or ``--project NAME``, ``--user``,
        ``--all``."""
        if sum([args.all, args.user, args.project is not None]) > 1:
            raise UsageError(f"{PROG} facts: give one of --project NAME, --user, --all")
        scope, title = Scope.of(self.here), "Facts"  # yours and this project's: what it sees
        if args.all:
            scope, title = Scope.everywhere(), "Facts of every project"
        elif args.user:
            scope, title = Scope.of(None), "Your facts"
        elif args.project is not None:
            name = self._known_project(args.project)
            scope, title = Scope.own(name), f"Facts of project {name}"
        facts = self.memory.facts.list(
            category=args.category, min_confidence=args.min_confidence, sort=args.sort, scope=scope
        )
        shown = facts[: args.limit] if args.limit else facts
        return facts_view(shown, title, total=len(facts))

    def add_project(self, args: AddArgs) -> str | None:
        """The project ``%memory add`` stores into (None: the user's own facts)."""
        if args.project and args.user:
            raise UsageError(f"{PROG} add: --project or --user, not both")
        if args.user or not self.here:
            return None
        if args.project or looks_like_project(args.text):
            return self.here
        return None

    def scope_words(self, fact: dict[str, Any]) -> str:
        owner = fact_project(fact)
        return f" in project {owner}" if owner else ""
