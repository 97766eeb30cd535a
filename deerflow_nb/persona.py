"""DeerFlow in JupyterLab's chat panel: a Jupyter AI persona running the ``%%agent`` lead agent.

``pip install 'deerflow-nb[jupyter-ai]'`` registers ``DeerFlowPersona`` under the entry-point
group ``jupyter_ai.personas``; a Jupyter server with ``jupyter-ai-persona-manager`` loads it
in every chat, and a message whose ``metadata["to_persona"]`` names it (the panel's persona
picker, or ``POST /api/ai/message/DeerFlow``) reaches ``process_message``.

The persona runs in the server process, beside the kernels on the same home, with the same
lead agent, tools and memory as ``%%agent`` (``Agent.run``, which journals its own turn: no
second way in). Where a chat belongs is decided as for a notebook: the chat file's folder
(its git root, a name set in config) is the project, and each chat is a thread of it, named
after the chat file. There is no kernel, so the agent runs with ``kernel=False``: its
notebook tools say they cannot see variables or cells. One ``Agent`` (and one started
``Memory``) per home per server process, shared by every chat and closed at exit; turns run
one at a time, off the event loop, and stream into the chat as the model writes, made inert
on the way (the chat renders Markdown itself: ``untrusted.MarkdownStream``); when a turn's
fold lands, the chat gets the notebook's "Memory updated: …" line as a message.

Importing this module imports ``jupyter_ai_persona_manager``; nothing else in the package
does (``%load_ext deerflow_nb`` never loads it).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_ai_persona_manager import BasePersona, PersonaDefaults

from .projects import Project, find_project

if TYPE_CHECKING:
    from jupyterlab_chat.models import Message

    from .agent.core import TurnResult
    from .config import Settings

log = logging.getLogger(__name__)

NAME = "DeerFlow"
AVATAR = Path(__file__).parent / "data" / "deerflow_avatar.svg"
DESCRIPTION = (
    "The deerflow_nb lead agent with your long-term memory: it knows what you told it in "
    "notebooks of this chat's project, and remembers what you tell it here. It cannot see "
    "notebook variables (no kernel runs here)."
)
SHOWN_FACTS = 5  # the injected facts a reply names below its footer


class ChatLead:
    """The lead agent of one home in this server: every chat's turns, one at a time."""

    def __init__(self, settings: Settings) -> None:
        from .agent import Agent

        self.settings = settings
        self.agent: Agent = Agent(settings=settings, namespace={}, kernel=False)
        from .notebook.fold_notice import FoldNotices

        memory = self.agent.memory  # opened and started now: folds run in the background
        memory.injection("warm up")  # the first turn's ranking and imports, paid here
        self.notices = FoldNotices(memory)  # "Memory updated: …" when a chat's fold lands
        self._turns = threading.Lock()  # Agent.last_turn is one per agent

    def project_of(self, chat_file: Path) -> Project:
        """The chat's project, found as a notebook's at ``chat_file`` would be (a name set
        in config wins; a found project renamed since is its new name)."""
        found = find_project(self.settings.project, notebook=chat_file)
        if found.how in ("git", "folder"):
            renamed = self.agent.memory.projects.renamed(found.name)
            if renamed != found.name:
                found = Project(renamed, found.how)
        return found

    def answer(
        self,
        message: str,
        chat_file: Path,
        on_text: Callable[[str], None],
        on_fold: Callable[[str], None] | None = None,
    ) -> TurnResult | None:
        """One lead turn in the chat's thread of its project, streamed to ``on_text``;
        ``on_fold`` hears what memory kept of it when its fold lands (from the worker)."""
        project = self.project_of(chat_file)
        with self._turns:
            folds_before = self.notices.mark()
            self.agent.run(message, chat_file.name, on_text=on_text, project=project.name)
            result = self.agent.last_turn
        if result is not None and on_fold is not None and self.settings.memory.enabled:
            self.notices.watch(result.thread, folds_before, on_fold)
        return result

    def close(self) -> None:
        self.notices.close()
        self.agent.close()


_LEADS: dict[Path, ChatLead] = {}
_LEADS_LOCK = threading.Lock()


def chat_lead() -> ChatLead:
    """The lead of the current home (``DEERFLOW_NB_HOME``, else ``~/.deerflow_nb``), made
    once per server process; slow the first time (it opens the journal): call it off the
    event loop."""
    from .config import load_settings

    settings = load_settings()
    with _LEADS_LOCK:
        lead = _LEADS.get(settings.home)
        if lead is None:
            lead = _LEADS[settings.home] = ChatLead(settings)
        return lead


def warm_lead() -> None:
    """Open the home's lead ahead of the first message (the persona joins a chat when the
    chat opens; the user is still typing), for a home already in use only: a server whose
    user never talks to DeerFlow leaves the home untouched. Failures are only logged: the
    first message says them in one line."""
    from .config import JOURNAL_FILENAME, MEMORY_FILENAME, default_home

    try:
        home = default_home()
        if (home / JOURNAL_FILENAME).exists() or (home / MEMORY_FILENAME).exists():
            chat_lead()
    except Exception:
        log.info("DeerFlow persona: memory not opened ahead of the first message", exc_info=True)


@atexit.register
def close_leads() -> None:
    """Stop every home's fold worker when the server exits (``BasePersona.shutdown`` is
    per chat, and one lead serves them all); a queued fold waits in the journal."""
    with _LEADS_LOCK:
        leads = list(_LEADS.values())
        _LEADS.clear()
    for lead in leads:
        lead.close()


def reply_footer(result: TurnResult | None, lead: ChatLead) -> str:
    """The notebook's footer line below the reply (``… · N facts injected · project X``),
    escaped (thread and project names are the user's text), then which facts those were."""
    from .notebook.agent_display import footer
    from .untrusted import escape_markdown

    if result is None:
        return ""
    line = f"\n\n---\n*{escape_markdown(footer(result, lead.agent.memory))}*"
    return line + (f"\n\n{injected_line(result.injected)}" if result.injected else "")


def injected_line(facts: list[str]) -> str:
    """``*Injected: “…”; “…”*``: the first ``SHOWN_FACTS`` facts a turn injected (escaped,
    line breaks folded), then how many more there were."""
    from .untrusted import escape_markdown

    quoted = "; ".join(f"“{escape_markdown(' '.join(f.split()))}”" for f in facts[:SHOWN_FACTS])
    more = len(facts) - SHOWN_FACTS
    return f"*Injected: {quoted}" + (f" and {more} more*" if more > 0 else "*")


def error_line(exc: BaseException) -> str:
    """One line for a turn that failed (a config.yaml typo, a model with no key): the
    chat shows what to fix, not a traceback; secrets are redacted as everywhere."""
    from .scrub import redact
    from .untrusted import clean_text, escape_markdown

    said = " ".join(clean_text(redact(str(exc))).split()) or type(exc).__name__
    return f"\n\n**deerflow_nb:** {escape_markdown(said)}"


class DeerFlowPersona(BasePersona):
    """The ``DeerFlow`` persona: ``%%agent``'s lead agent and memory in the chat panel."""

    @property
    def defaults(self) -> PersonaDefaults:
        """Name, description, avatar, and the lead's prompt where no kernel is (each turn
        adds the memory block of the chat's project to it)."""
        from .agent.core import CHAT_PROMPT

        return PersonaDefaults(
            name=NAME,
            description=DESCRIPTION,
            avatar_path=str(AVATAR),
            system_prompt=CHAT_PROMPT,
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Made when a chat opens (one per chat): memory is opened now, in the background,
        so the first reply does not wait for it."""
        super().__init__(*args, **kwargs)
        threading.Thread(target=warm_lead, name="deerflow-nb-persona-warm", daemon=True).start()

    async def process_message(self, message: Message) -> None:
        """Answer ``message`` in this chat's thread, streaming the reply, then the footer."""
        await self.stream_message(self._reply(message.body, Path(self.get_chat_path())))

    async def _reply(self, text: str, chat_file: Path) -> AsyncIterator[str]:
        """The turn's text as it comes (the agent runs in a worker thread), made inert for
        the chat's Markdown renderer (``MarkdownStream``: images as links, tags as text),
        then the footer or one line saying why the turn failed."""
        from .untrusted import MarkdownStream

        loop = asyncio.get_running_loop()
        inert = MarkdownStream()
        chunks: asyncio.Queue[str | None] = asyncio.Queue()

        def on_text(delta: str) -> None:
            loop.call_soon_threadsafe(chunks.put_nowait, delta)

        def on_fold(note: str) -> None:
            loop.call_soon_threadsafe(self._say_fold, note)

        def turn() -> tuple[ChatLead, TurnResult | None]:
            try:
                lead = chat_lead()
                return lead, lead.answer(text, chat_file, on_text, on_fold)
            finally:
                loop.call_soon_threadsafe(chunks.put_nowait, None)

        job = asyncio.ensure_future(asyncio.to_thread(turn))
        done = False
        while not done:
            batch = [await chunks.get()]
            while not chunks.empty():  # what came meanwhile goes as one chunk: the chat
                batch.append(chunks.get_nowait())  # rewrites its file on every chunk
            done = batch[-1] is None
            yield inert.feed("".join(d for d in batch if d is not None))
        rest = inert.end()
        try:
            lead, result = await job
        except Exception as exc:  # the chat says what failed; the log keeps the traceback
            log.exception("DeerFlow persona: the turn failed")
            yield rest + error_line(exc)
            return
        yield rest + reply_footer(result, lead)

    def _say_fold(self, note: str) -> None:
        """The fold's line as a message of its own (fact texts are the model's: escaped);
        a chat closed since hears nothing (the notebook's ``%memory`` still shows it)."""
        from .untrusted import escape_markdown

        try:
            self.send_message(f"*{escape_markdown(note)}*")
        except Exception:
            log.info("DeerFlow persona: the fold's note found no chat", exc_info=True)
