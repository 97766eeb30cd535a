"""``%memory``: the line magic that views and changes long-term memory.

The line is parsed into typed args (``memory_args``), handled (``memory_commands``), and
the view returned; every error the user can fix is one ``UsageError`` line
(``errors.fixable_errors``, shared with ``%%agent``). A bare ``%memory`` shows the panel
in a notebook and a text summary in a terminal.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_magic, magics_class, no_var_expand

from ..config import HomeError
from .errors import fixable_errors
from .memory_args import Args, PanelArgs, parse_memory_line
from .memory_commands import MemoryCommands
from .session import get_session

if TYPE_CHECKING:
    from .panel import MemoryPanel
    from .session import Session

# The subcommands that only read: on a home this kernel cannot write (a shared course
# folder, a read-only mount) they read through the read door instead of failing.
READ_ONLY = frozenset({"facts", "status", "history", "versions", "diff", "pending"})


def in_notebook_kernel(shell: Any) -> bool:
    """True inside a Jupyter kernel, where widgets can render."""
    return (
        type(shell).__name__ == "ZMQInteractiveShell" or getattr(shell, "kernel", None) is not None
    )


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

    @staticmethod
    def _read_only(session: Session, args: Args) -> Any:
        """A view of a home this kernel cannot write, read through the read door: what
        ``deerflow-nb status`` reads there, the notebook shows too."""
        from ..memory import ReadOnlyMemory, open_reader

        with open_reader(session.settings.home, settings=session.settings) as reader:
            return MemoryCommands(ReadOnlyMemory(reader), session).run(args)  # type: ignore[arg-type]

    @no_var_expand
    @line_magic
    def memory(self, line: str = "") -> Any:
        """View and change long-term memory; run ``%memory --help`` for the subcommands."""
        args = parse_memory_line(line, self.shell.user_ns)
        if args is None:
            return None
        with fixable_errors():  # a config.yaml typo, a damaged memory.json: one line, once
            session = get_session(self.shell)
            try:
                memory = session.memory
            except HomeError:
                home = session.settings.home
                if args.command not in READ_ONLY or not _only_readable(home):
                    raise  # a full disk, a locked journal: the one line says what to fix
                return self._read_only(session, args)
            commands = MemoryCommands(memory, session)
            if isinstance(args, PanelArgs):
                if line.strip() or in_notebook_kernel(self.shell):
                    return self._new_panel(commands, args)
                return commands.summary()
            return commands.run(args)


def _only_readable(home: Path) -> bool:
    """A home folder this process may read but not write (a read-only mount or folder)."""
    return home.is_dir() and os.access(home, os.R_OK | os.X_OK) and not os.access(home, os.W_OK)
