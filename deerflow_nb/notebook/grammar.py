"""Magic arguments declared once: the typed dataclass whose fields carry their spelling.

A magic's arguments are a frozen dataclass. Each field says how it is written on the
line (``option("--sort", choices=…)``, ``switch("--yes")``, ``positional("ID", nargs="*")``,
``words("TEXT")``); :func:`build_parser` makes the argparse parser from those fields,
:func:`typed_args` the dataclass from what it parsed, and :func:`synopsis` the usage the
README's tables show (``scripts/readme_tables.py``). So the grammar, the typed values and
the documentation cannot drift apart.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, NoReturn, TypeVar

from .errors import usage_error

T = TypeVar("T")
_SPELLING = "spelling"  # the dataclass field metadata key


@dataclass(frozen=True)
class Spelling:
    """How one argument is written: its flags (none for a positional) and argparse's keys."""

    flags: tuple[str, ...] = ()
    metavar: str | None = None
    help: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None  # "?", "*" or "+"
    is_switch: bool = False  # a flag without a value: True when given
    is_words: bool = False  # the words given, joined into one text
    empty: str | None = None  # for words: the error when they are only spaces

    def usage(self, dest: str) -> str:
        """The argument as a usage fragment: ``[--sort confidence|created]``, ``ID...``."""
        if not self.flags:
            name = self.shown_value(dest)
            return {"+": f"{name}...", "*": f"[{name}...]", "?": f"[{name}]"}.get(
                self.nargs or "", name
            )
        flags = "/".join(sorted(self.flags, key=len))
        return f"[{flags}]" if self.is_switch else f"[{flags} {self.shown_value(dest)}]"

    def shown_value(self, dest: str) -> str:
        """What stands for the value in a usage line: the metavar, a few choices, or DEST."""
        if self.metavar:
            return self.metavar
        if self.choices is not None and len(self.choices) <= 3:
            return "|".join(self.choices)
        return dest.upper()

    def add_to(self, parser: argparse.ArgumentParser, dest: str, default: Any) -> None:
        """Declare the argument on ``parser``, its value stored under ``dest``."""
        if self.is_switch:
            parser.add_argument(*self.flags, dest=dest, action="store_true", help=self.help)
            return
        keys = {
            "metavar": self.metavar,
            "help": self.help,
            "type": self.type,
            "choices": self.choices,
            "nargs": self.nargs,
        }
        given = {k: v for k, v in keys.items() if v is not None}
        if self.flags:  # an option: always has a default (None unless declared)
            parser.add_argument(*self.flags, dest=dest, default=default, **given)
        elif self.nargs in ("*", "?"):  # optional: argparse requires a bare "*" positional
            parser.add_argument(dest, default=default, **given)
        else:
            parser.add_argument(dest, **given)


def _spelled(spelling: Spelling, default: Any = MISSING) -> Any:
    return field(default=default, metadata={_SPELLING: spelling})


def option(
    *flags: str,
    default: Any = None,
    metavar: str | None = None,
    help: str | None = None,
    type: Callable[[str], Any] | None = None,
    choices: Sequence[str] | None = None,
) -> Any:
    """A flag that takes a value: ``--category CATEGORY``."""
    chosen = tuple(choices) if choices is not None else None
    return _spelled(Spelling(flags, metavar, help, type, chosen), default)


def switch(*flags: str, help: str | None = None) -> Any:
    """A flag without a value, False unless given: ``--yes``."""
    return _spelled(Spelling(flags, help=help, is_switch=True), False)


def positional(
    metavar: str | None = None,
    *,
    nargs: str | None = None,
    type: Callable[[str], Any] | None = None,
    choices: Sequence[str] | None = None,
) -> Any:
    """A value by position, required unless ``nargs`` says otherwise (then None, or ``()``
    for ``nargs="*"``); with ``choices`` and no metavar, the usage lists the choices."""
    chosen = tuple(choices) if choices is not None else None
    spelling = Spelling((), metavar, type=type, choices=chosen, nargs=nargs)
    return _spelled(spelling, {"*": (), "?": None}.get(nargs or "", MISSING))


def words(metavar: str, *, required: bool = True, empty: str | None = None) -> Any:
    """The rest of the words, joined into one text (``add Prefers polars`` needs no quotes);
    ``empty`` is the error when they are only spaces."""
    spelling = Spelling((), metavar, nargs="+" if required else "*", is_words=True, empty=empty)
    return _spelled(spelling, MISSING if required else None)


def spellings(cls: type) -> Iterator[tuple[str, Spelling]]:
    """Each field of an args dataclass with its spelling, in declaration order."""
    for f in fields(cls):
        yield f.name, f.metadata[_SPELLING]


def synopsis(cls: type) -> list[str]:
    """The usage fragments of an args dataclass, in order."""
    return [spelling.usage(name) for name, spelling in spellings(cls)]


class HelpShown(Exception):
    """argparse printed the help (``--help``); the magic shows nothing else."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises a one-line ``UsageError`` instead of exiting the kernel.

    The message ends with the fix: ``run PROG --help``, or with ``show_usage`` the usage
    line itself (short enough for a magic with one set of flags).
    """

    def __init__(self, *args: Any, show_usage: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.show_usage = show_usage

    def error(self, message: str) -> NoReturn:
        if self.show_usage:
            fix = "usage: " + " ".join(self.format_usage().split()[1:])
        else:
            fix = f"run {self.prog} --help"
        words = message.removeprefix("unrecognized arguments: ").split()
        if words and words[0][:1] == "-" and words[0][1:2] not in ("-", ""):  # "-O2", text
            fix = f"a word of your text starts with -: put -- before the text; or {fix}"
        raise usage_error(f"{self.prog}: {message}; {fix}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status:
            raise usage_error(f"{self.prog}: {(message or 'error').strip()}")
        raise HelpShown


HELP = Spelling(("-h", "--help"), help="show this help and run nothing", is_switch=True)


def build_parser(parser: argparse.ArgumentParser, cls: type) -> argparse.ArgumentParser:
    """Declare ``-h/--help`` and every field of ``cls`` on ``parser`` (made with
    ``add_help=False``); returns it."""
    parser.add_argument(*HELP.flags, action="help", help=HELP.help)
    for f in fields(cls):
        f.metadata[_SPELLING].add_to(parser, f.name, f.default)
    return parser


def typed_args(cls: type[T], parsed: argparse.Namespace, prog: str) -> T:
    """The frozen ``cls`` built from what argparse parsed: word lists joined into one text
    (an error when only spaces), other lists as tuples."""
    values: dict[str, Any] = {}
    for name, spelling in spellings(cls):
        value = getattr(parsed, name)
        if spelling.is_words:
            value = " ".join(value) if value else None
            if value is not None and not value.strip():
                raise usage_error(
                    f"{prog}: {spelling.empty or f'{name} is empty; give some words'}"
                )
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return cls(**values)


def split_line(line: str, prog: str) -> list[str]:
    """A magic's line as shell-like words, the one splitter every magic uses: quotes group
    words; a backslash is kept as written (a Windows path, a pattern), a ``#`` too; an
    unpaired apostrophe ("I'm") is read as a letter. A one-line ``UsageError`` naming
    ``prog`` for an unpaired double quote."""
    for quotes in ("'\"", '"'):
        lexer = shlex.shlex(line, posix=True)
        lexer.whitespace_split, lexer.commenters, lexer.escape = True, "", ""
        lexer.quotes = quotes
        try:
            return list(lexer)
        except ValueError:
            continue
    raise usage_error(f'{prog}: unbalanced quote; close the " in the line')
