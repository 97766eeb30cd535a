"""``%memory share``, ``join`` and ``sync``: a project's memory shared through the team's
PostgreSQL (``memory/sharing.py``, docs/team.md).

A server that cannot be reached, a wrong password or a role that is no member is one
``UsageError`` line naming the fix; the URL is never echoed (it may hold a password).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from .errors import usage_error
from .memory_args import PROG, JoinArgs, ShareArgs, SyncArgs

if TYPE_CHECKING:
    from ..memory import Memory, SyncReport


class TeamCommands:
    """The team half of ``MemoryCommands`` (it holds ``memory``)."""

    memory: Memory

    def _url(self, args: ShareArgs | JoinArgs) -> str:
        if not args.url:
            raise UsageError(
                f"{PROG} {args.command}: give the team's server, e.g. {PROG} {args.command} "
                f"{args.name} --url postgresql://ROLE@HOST:5432/DATABASE"
            )
        return args.url

    def handle_share(self, args: ShareArgs) -> SyncReport:
        try:
            report = self.memory.share(args.name, self._url(args))
        except ValueError as exc:  # SharedError: the server, the password, the role
            raise usage_error(f"{PROG} share: {exc}") from None
        self.memory.team.start_sync()  # a kernel keeps it in sync from now on
        return report

    def handle_join(self, args: JoinArgs) -> SyncReport:
        try:
            report = self.memory.join(args.name, self._url(args))
        except ValueError as exc:
            raise usage_error(f"{PROG} join: {exc}") from None
        self.memory.team.start_sync()
        return report

    def handle_sync(self, args: SyncArgs) -> SyncReport:
        if not self.memory.team.projects():
            raise UsageError(
                f"{PROG} sync: no project is shared yet; run {PROG} join NAME --url URL "
                "(or share NAME --url URL)"
            )
        return self.memory.sync()
