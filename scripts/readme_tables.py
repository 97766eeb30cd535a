"""The docs' tables that come from code, written by cog so they cannot drift.

README.md and docs/*.md hold ``[[[cog ... ]]]`` blocks (inside HTML comments) that call
these functions; each returns the Markdown the block holds:

    .venv/bin/cog -I scripts -r README.md docs/*.md       # rewrite the blocks (make readme)
    .venv/bin/cog -I scripts --check README.md docs/*.md  # fail if one is stale (make lint)

- ``memory_commands()``: the ``%memory`` subcommands, from their args classes
  (``notebook/memory_args.py``, each field spelled as ``notebook/grammar.py`` declares it);
- ``agent_synopsis()``, ``agent_flags()``: ``%%agent``'s flags, from ``AgentArgs``
  (``notebook/agent_magic.py``);
- ``config_yaml()``: every config.yaml key with its default, from ``schema.SETTINGS_SECTIONS``
  (the comments are the ones below, each checked to name a real key);
- ``notebooks()``: the example notebooks, from their ``.md`` front matter
  (``deerflow_nb: {shows: ...}``) or, without it, their title;
- ``injection_example()``: the Facts of a ``<memory>`` block, as
  ``format_memory_for_injection`` lays out ``EXAMPLE_FACTS``;
- ``readme_as_index()``: the README as the site's home page (docs/index.md), its links
  rewritten for a page inside docs/.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deerflow_nb.notebook.grammar import Spelling

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _cell(text: str) -> str:
    """Text for a Markdown table cell: pipes escaped."""
    return text.replace("|", "\\|")


def memory_commands() -> str:
    """The ``%memory`` table: one row per subcommand, its arguments and what it does."""
    from deerflow_nb.notebook.grammar import synopsis
    from deerflow_nb.notebook.memory_args import COMMANDS, DESCRIPTION, PROG
    from deerflow_nb.schema.constants import CATEGORIES

    rows = ["| command | what it does |", "|---|---|", f"| `{PROG}` | {_cell(DESCRIPTION)} |"]
    for cls in COMMANDS:
        usage = " ".join([PROG, cls.command, *synopsis(cls)])
        rows.append(f"| `{_cell(usage)}` | {_cell(cls.about)} |")
    rows.append("")
    rows.append(f"CATEGORY is one of {', '.join(f'`{c}`' for c in CATEGORIES)}.")
    return "\n".join(rows) + "\n"


def cli_commands() -> str:
    """The ``deerflow-nb`` table: one row per subcommand, its usage and what it does."""
    import argparse

    from deerflow_nb.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help for c in sub._choices_actions}
    rows = ["| command | what it does |", "|---|---|"]
    for name, command in sub.choices.items():
        usage = " ".join(command.format_usage().split()[1:]) if command.add_help else ""
        usage = usage or f"deerflow-nb {name} [--help]"
        rows.append(f"| `{_cell(usage)}` | {_cell(helps[name] or '')} |")
    return "\n".join(rows) + "\n"


def _agent_arguments() -> list[tuple[str, Spelling]]:
    """``%%agent``'s arguments, ``-h/--help`` first, as its parser declares them."""
    from deerflow_nb.notebook.agent_magic import AgentArgs
    from deerflow_nb.notebook.grammar import HELP, spellings

    return [("help", HELP), *spellings(AgentArgs)]


def agent_synopsis() -> str:
    """``%%agent [-h/--help] [-t/--thread NAME] …``, wrapped as docs/reference.md shows it."""
    from deerflow_nb.notebook.agent_magic import PROG

    words = [PROG] + [spelling.usage(name) for name, spelling in _agent_arguments()]
    lines, line = [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > 88:
            lines.append(line)
            line = " " * (len(words[0]) + 1) + word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "```\n" + "\n".join(lines) + "\n```\n"


def agent_flags() -> str:
    """The ``%%agent`` flags table: each flag, its value, what it does."""
    rows = ["| flag | what it does |", "|---|---|"]
    for name, spelling in _agent_arguments():
        flags = ", ".join(sorted(spelling.flags, key=len))
        if not spelling.is_switch:
            flags += f" {spelling.shown_value(name)}"
        rows.append(f"| `{_cell(flags)}` | {_cell(spelling.help or '')} |")
    return "\n".join(rows) + "\n"


# Comments shown beside config.yaml keys; each must name a key the settings have.
CONFIG_COMMENTS = {
    "model.name": "default gpt-4o-mini when a key or base URL is set",
    "model.base_url": "any OpenAI-compatible server: Azure, Ollama, vLLM, LM Studio",
    "model.send_openai_key_to_base_url": "OPENAI_API_KEY is not sent to a custom base URL "
    "unless true",
    "model.max_retries": "429, 5xx and timeouts, with backoff",
    "model.max_output_tokens": "output cap of folds and consolidation",
    "memory.model_name": "a cheaper model for extraction",
    "memory.embeddings": "local:<name or path> | openai:<model>",
    "memory.review": "folds wait for %memory approve",
    "memory.review_outside_forget": "an MCP client's forget waits for approval",
    "summarization.trigger": "any of tokens | messages | fraction",
    "summarization.keep": "messages | tokens | fraction",
    "summarization.trim_tokens_to_summarize": "a summary is capped at a quarter of it",
}


def _yaml(value: Any) -> str:
    """A default as the reference writes it: flow style, whole floats without ``.0``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return str(value)


def config_yaml() -> str:
    """config.yaml with every key at its default, in a ```` ```yaml ```` block."""
    from deerflow_nb.schema.settings import SETTINGS_SECTIONS

    lines, seen = [], set()
    for section, model in SETTINGS_SECTIONS.items():
        lines.append(f"{section}:")
        for key, value in model().model_dump().items():
            seen.add(f"{section}.{key}")
            line = f"  {key}: {_yaml(value)}"
            comment = CONFIG_COMMENTS.get(f"{section}.{key}")
            if comment:
                line = f"{line:<32}# {comment}" if len(line) < 32 else f"{line}   # {comment}"
            lines.append(line)
    unknown = sorted(set(CONFIG_COMMENTS) - seen)
    if unknown:
        raise SystemExit(f"readme_tables.CONFIG_COMMENTS names unknown keys: {unknown}")
    return "```yaml\n" + "\n".join(lines) + "\n```\n"


def notebooks() -> str:
    """The example notebooks table, from each ``.md``'s front matter (or title)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import jupytext
    import sync_notebooks

    rows = ["| notebook | shows |", "|---|---|"]
    for source in sorted(sync_notebooks.sources(), key=lambda p: (p.stem != "quickstart", p.stem)):
        nb = jupytext.read(source)
        shows = (nb.metadata.get("deerflow_nb") or {}).get("shows")
        if not shows:
            title = next((c.source for c in nb.cells if c.cell_type == "markdown"), "")
            shows = title.splitlines()[0].lstrip("# ") if title else source.stem
        link = f"/example_notebooks/{source.name}"
        rows.append(f"| [`{source.stem}`]({link}) | {_cell(shows)} |")
    return "\n".join(rows) + "\n"


# A Markdown link's or image's target that is relative: not a URL, an anchor or a root path.
_RELATIVE_TARGET = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)")


def _from_docs(target: str) -> str:
    """``target``, relative to the repository's root, as a page in docs/ links to it: a
    docs file relative to the page, any other file from the root (see mkdocs.yml)."""
    return target.removeprefix("docs/") if target.startswith("docs/") else f"/{target}"


def readme_as_index() -> str:
    """The README, for docs/index.md: one text for GitHub's front page and the site's."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    if "[[[cog" in text:
        raise SystemExit("README.md holds a cog block: generate it in docs/, not the README")
    return _RELATIVE_TARGET.sub(lambda m: f"]({_from_docs(m.group(1))})", text)


# (content, category, confidence, learned on) of docs/memory.md's example block.
EXAMPLE_FACTS = (
    ("Prefers polars over pandas", "preference", 0.95, "2026-03-02"),
    ("Uses DuckDB for local analytics", "preference", 0.95, "2026-02-10"),
    ("Works on churn prediction for a telecom", "context", 0.85, "2026-03-01"),
    ("Retrains the churn model every Monday", "context", 0.85, "2026-03-01"),
    ("Presents to the board on 12 March", "context", 0.85, "2026-03-04"),
    ("Moved to Lisbon", "context", 0.85, "2025-11-20"),
    ("Wants to learn Rust", "goal", 0.8, None),
)


def injection_example() -> str:
    """The Facts part of the block for ``EXAMPLE_FACTS``, in a code block."""
    from deerflow_nb.memory.retrieval.injection import format_memory_for_injection

    facts = [
        {
            "id": f"f{n}",
            "content": content,
            "category": category,
            "confidence": confidence,
            "createdAt": f"{date}T09:00:00Z" if date else None,
            "source": "manual",
        }
        for n, (content, category, confidence, date) in enumerate(EXAMPLE_FACTS)
    ]
    block = format_memory_for_injection({"facts": facts}, 2000)
    facts_part = block.split("\n", 1)[1].rsplit("\n", 1)[0]  # without the tags
    return f"```\n{facts_part}\n```\n"
