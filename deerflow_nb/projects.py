"""Which project a notebook belongs to: named by the user, or found from where it lives.

Memory keeps the user's own facts (shared by every notebook) apart from each project's
(its data, columns, decisions, results). A notebook's project is, in order: the name the
user gave (``%memory project NAME``, ``%%agent --project NAME``, ``DEERFLOW_NB_PROJECT``
or ``project:`` in config.yaml, both read by ``config.py``); else the root folder name of
the git repository holding the notebook; else the notebook's folder (the path Jupyter
Server gives the kernel, else the kernel's working directory); else ``default``. A home
folder or the filesystem root says nothing about a project, so a kernel started there is
in ``default``.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .home import short_repr

DEFAULT_PROJECT = "default"
PROJECT_ENV = "DEERFLOW_NB_PROJECT"
# Jupyter Server tells a kernel its notebook's path in JPY_SESSION_NAME (IPython also
# sets ``__session__`` in the namespace from it).
NOTEBOOK_ENV = "JPY_SESSION_NAME"
MAX_NAME = 64
MAX_THREAD_NAME = 128
HASH_CHARS = 8  # the suffix that keeps two long names apart once cut
_BAD = re.compile(r"[^\w.\- ]+")
_SEPARATORS = re.compile(r"[/\\]+")
# Unicode's control, format (bidi, zero-width), surrogate, private-use and unassigned
# categories: nothing a name needs, and each can hide or fake what a name says.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})

# A fact's scope in memory.json: no ``scope`` key (DeerFlow's plain fact) is the user's.
PROJECT_SCOPE = "project"


@dataclass(frozen=True)
class Project:
    """A notebook's project and how it was found (``named``, ``git``, ``folder``, ``default``)."""

    name: str
    how: str

    def describe(self) -> str:
        """``churn (git root)``: the name and where it came from, for footers and status."""
        how = {"named": "set", "git": "git root", "folder": "folder"}.get(self.how, "nothing found")
        return f"{self.name} ({how})"


def project_name(text: str) -> str:
    """``text`` as a project name, the one rule every path (``%memory``, ``Agent.run``,
    imports, renames) applies: NFC, one line of letters, digits, ``-``, ``_``, ``.`` and
    spaces (no separators, controls or path parts), at most ``MAX_NAME`` characters, a long
    name cut with a hash of the whole so two never meet. Idempotent; ValueError (naming
    the fix) when nothing is left."""
    name = " ".join(_BAD.sub("-", _plain(text)).split()).strip(" .-")
    if not name:
        raise ValueError(f"{text!r} is not a project name; use letters, digits, '-', '_' or '.'")
    return _bounded(name, MAX_NAME)


def check_project_name(text: str) -> str:
    """A project name the user gives (``%memory project``, ``%%agent --project``,
    config.yaml, ``DEERFLOW_NB_PROJECT``, ``deerflow-nb share``, the MCP server), the one
    rule every entry applies: refused, not rewritten, when it holds a path separator or a
    control character (a NUL, a tab, a newline inside it), or is only dots, because
    ``project_name`` would silently make ``../../etc`` into another project, ``etc``.
    Otherwise ``project_name(text)`` (a zero-width or bidi character is still dropped, as
    before); names already stored are read with ``project_name`` alone. ValueError naming
    the fix."""
    given = text.strip()
    if (
        _SEPARATORS.search(given)
        or not given.strip(".")
        or any(unicodedata.category(c) == "Cc" for c in given)
    ):
        raise ValueError(
            f"{short_repr(text)} is not a project name; use letters, digits, spaces, '-', '_' "
            "or '.', without '/', '\\' or control characters (and not '.' or '..')"
        )
    return project_name(text)


def thread_name(text: str) -> str:
    """``text`` as a thread name, by the project name's rule but keeping punctuation (a
    thread is a conversation's label, and ``Journal.thread_for`` writes ``NAME @project``):
    NFC, one line, no controls or path separators, at most ``MAX_THREAD_NAME`` characters
    with a hash of the whole when cut. Idempotent; ValueError when nothing is left."""
    name = " ".join(_SEPARATORS.sub("-", _plain(text)).split()).strip()
    if not name:
        raise ValueError(f"{text!r} is not a thread name; use letters, digits or punctuation")
    return _bounded(name, MAX_THREAD_NAME)


def _plain(text: object) -> str:
    """``text`` in NFC with lone surrogates as U+FFFD (a pair as its character), spaces of
    every kind as one space and hidden characters (a NUL, a zero-width space) left out."""
    from .scrub import encodable

    text = unicodedata.normalize("NFC", encodable(str(text)))
    return "".join(
        " " if c.isspace() else c
        for c in text
        if c.isspace() or unicodedata.category(c) not in _HIDDEN
    )


def _bounded(name: str, limit: int) -> str:
    """``name`` if it fits in ``limit``, else its start and a short hash of all of it."""
    if len(name) <= limit:
        return name
    import hashlib  # only a name too long to keep whole needs it: not on %load_ext's path

    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:HASH_CHARS]
    return f"{name[: limit - HASH_CHARS - 1].rstrip()}-{digest}"


def notebook_path(namespace: dict[str, object] | None = None) -> Path | None:
    """The notebook's path as Jupyter Server gave it to the kernel, or None."""
    given = (namespace or {}).get("__session__") or os.environ.get(NOTEBOOK_ENV)
    if isinstance(given, str) and given.strip():
        path = Path(given.strip()).expanduser()
        return path if path.is_absolute() else Path.cwd() / path
    return None


def git_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` holding ``.git`` (a folder or a worktree's
    file), or None."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def find_project(
    named: str | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    notebook: str | os.PathLike[str] | None = None,
) -> Project:
    """The project for a notebook at ``notebook`` (a file) run with ``cwd`` (see the module
    docstring for the order); ``named`` wins when given (ValueError when it is not a name,
    ``check_project_name``)."""
    if named and named.strip():
        return Project(check_project_name(named), "named")
    folder = Path(notebook).parent if notebook else Path(cwd or Path.cwd())
    try:
        folder = folder.resolve()
    except OSError:
        return Project(DEFAULT_PROJECT, "default")
    root = git_root(folder)
    if root is not None and not _says_nothing(root):
        return Project(_name_or_default(root.name), "git")
    if not _says_nothing(folder):
        return Project(_name_or_default(folder.name), "folder")
    return Project(DEFAULT_PROJECT, "default")


def _says_nothing(folder: Path) -> bool:
    """The filesystem root, the user's home and the temp folder name no project."""
    try:
        home = Path.home().resolve()
    except (OSError, RuntimeError):
        home = None
    return folder == Path(folder.anchor) or folder == home or folder.name in ("", "tmp")


def _name_or_default(name: str) -> str:
    try:
        return project_name(name)
    except ValueError:
        return DEFAULT_PROJECT


def fact_project(fact: Mapping[str, object]) -> str | None:
    """The project a fact belongs to, or None for the user's own (DeerFlow's plain) facts
    (a project fact without a name is ``default``'s); what a scope sees is
    ``memory.scopes.Scope.sees``'s rule, built on this one."""
    if fact.get("scope") == PROJECT_SCOPE:
        project = fact.get("project")
        return project if isinstance(project, str) and project else DEFAULT_PROJECT
    return None


# Words that make a statement about a project's data and work rather than about the user:
# what ``remember`` and ``%memory add`` default to when no scope is given.
_PROJECT_WORDS = re.compile(
    r"\b(?:this|our|the) (?:project|team|notebook|analysis|dataset)\b|"
    r"\b(?:data ?set|data|column|columns|target|label|feature|features|table|file|csv|"
    r"parquet|split|fold|folds|cv|cross-validation|random_state|seed|baseline|auc|"
    r"accuracy|f1|rmse|mae|precision|recall|metric|scored|score|model|stakeholders?|"
    r"client|clinical|team|rows|schema|pipeline|experiment|deadline)\b|"
    r"\w+\.(?:csv|parquet|json|xlsx|feather|db)\b",
    re.IGNORECASE,
)
_USER_WORDS = re.compile(
    r"^(?:the user |they |he |she )?(?:prefers?|likes?|dislikes?|is a|is an|works as|"
    r"their name|name is|lives|speaks|knows|always|never|usually|wants|has \d+ years)\b",
    re.IGNORECASE,
)


def looks_like_project(text: str) -> bool:
    """Whether ``text`` reads as a project's fact (its data, columns, metrics, decisions)
    rather than the user's own (who they are, what they prefer): the default scope."""
    if _USER_WORDS.search(text.strip()):
        return False
    return bool(_PROJECT_WORDS.search(text))
