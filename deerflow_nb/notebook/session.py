"""Per-shell state: the settings, one ``Memory`` and the agents the magics share.

Kept apart from the magics so ``%%agent``, ``%memory`` and the panel all talk to the
same ``Memory`` (one queue worker) without passing objects around.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from ..config import default_home, load_settings
from ..projects import Project, find_project, notebook_path

if TYPE_CHECKING:
    from ..agent import Agent
    from ..config import Settings
    from ..memory import Memory
    from .fold_notice import FoldNotices

_ATTR = "_deerflow_nb_session"
# %load_ext may open memory in a background thread while the first cell runs: one of each.
_LOCK = threading.RLock()


class Session:
    """What one IPython shell holds: settings, memory, and agents by model name."""

    def __init__(self, shell: Any, settings: Settings) -> None:
        self.shell = shell
        self.settings = settings
        self._memory: Memory | None = None
        self._agents: dict[str, Agent] = {}
        self._notices: FoldNotices | None = None
        self._project: Project | None = None

    @property
    def project(self) -> Project:
        """The notebook's project: named (``%memory project``, ``project:`` in config.yaml,
        ``DEERFLOW_NB_PROJECT``), else found from the notebook's git root or folder, and
        then followed through a rename (``%memory project OLD --rename NEW``), which
        opening memory reads."""
        with _LOCK:
            if self._project is None:
                found = self._found()
                if found.how in ("git", "folder"):
                    from ..config import ConfigError

                    try:
                        self.memory  # noqa: B018 (opening memory settles the project)
                    except ConfigError:  # said by the command that needs memory
                        self._project = found
                else:
                    self._project = found
            return self._project

    def _found(self) -> Project:
        namespace = getattr(self.shell, "user_ns", None)
        return find_project(
            self.settings.project, cwd=os.getcwd(), notebook=notebook_path(namespace)
        )

    def _settle_project(self, memory: Memory) -> None:
        """Settle the project this notebook's ``memory`` works in: the one set, or the one
        found from its folder under the name a rename gave it since (the session passes it
        to memory on every call)."""
        project = self._project or self._found()
        if project.how in ("git", "folder"):
            renamed = memory.projects.renamed(project.name)
            if renamed != project.name:
                project = Project(renamed, project.how)
        self._project = project

    def set_project(self, name: str) -> Project:
        """Switch this notebook to project ``name`` (ValueError for a name that is none)."""
        with _LOCK:
            self._project = find_project(name)
            return self._project

    @property
    def memory(self) -> Memory:
        with _LOCK:
            if self._memory is None:
                from ..memory import Memory

                memory = Memory(self.settings.home, settings=self.settings)
                try:
                    self._settle_project(memory)
                    memory.start()  # a kernel folds in the background
                    memory.team.start_sync()  # and syncs shared projects (memory/team_sync.py)
                except BaseException:
                    memory.close()
                    raise
                self._memory = memory
            return self._memory

    @property
    def notices(self) -> FoldNotices:
        """What the cells of this shell wait to hear from memory's folds (one listener)."""
        with _LOCK:
            if self._notices is None:
                from .fold_notice import FoldNotices

                self._notices = FoldNotices(self.memory)
            return self._notices

    def agent(self, model: str | None = None) -> Agent:
        """The lead agent for ``model`` (default: the configured one), created once."""
        from ..agent import Agent

        key = model or self.settings.chat_model_name
        if key not in self._agents:
            self._agents[key] = Agent(
                settings=self.settings, model=model, memory=self.memory, shell=self.shell
            )
        return self._agents[key]

    def close(self) -> None:
        if self._notices is not None:
            self._notices.close()
            self._notices = None
        if self._memory is not None:
            self._memory.team.stop_sync()
            self._memory.close()
            self._memory = None
        self._agents.clear()


def get_session(shell: Any) -> Session:
    """The shell's session, rebuilt when ``DEERFLOW_NB_HOME`` now points elsewhere."""
    with _LOCK:
        session: Session | None = getattr(shell, _ATTR, None)
        if session is not None and session.settings.home == default_home():
            return session
        if session is not None:
            session.close()
        session = Session(shell, load_settings())
        setattr(shell, _ATTR, session)
        return session


def close_session(shell: Any) -> None:
    session: Session | None = getattr(shell, _ATTR, None)
    if session is not None:
        session.close()
        setattr(shell, _ATTR, None)
