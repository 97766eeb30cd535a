"""Views of facts: the facts table, search results and the injection preview."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...schema.constants import SUGGESTION_MARK, is_model_suggestion
from ...untrusted import clean_text, code_block, escape_html
from .table import Table, View, confidence_bar, count_of, day, html_bar, md_cell, short

if TYPE_CHECKING:
    from ...memory import Memory


@dataclass(frozen=True, repr=False)
class FactsTable(View):
    """Facts with id, category, a confidence bar, content and creation time."""

    facts: tuple[Mapping[str, Any], ...]
    title: str = "Facts"
    total: int | None = None  # how many matched, when ``facts`` is the first page of them

    def table(self) -> Table:
        headers = ("id", "category", "confidence", "content", "created", "scope")
        rows = [
            (
                f.get("id"),
                f.get("category"),
                confidence_bar(f.get("confidence")),
                marked(f, short(f.get("content"), 80)),
                day(f.get("createdAt")),
                scope_of(f),
            )
            for f in self.facts
        ]
        html_rows = [
            [
                escape_html(str(f.get("id", ""))),
                escape_html(str(f.get("category", ""))),
                html_bar(f.get("confidence")),
                escape_html(marked(f, str(f.get("content", "")))),
                escape_html(day(f.get("createdAt"))),
                escape_html(scope_of(f)),
            ]
            for f in self.facts
        ]
        shown = len(self.facts)
        of = f" of {self.total}" if self.total is not None and self.total != shown else ""
        title = f"{self.title} ({shown}{of})"
        return Table(headers, rows, title, "No facts.", html_rows)


def scope_of(fact: Mapping[str, Any]) -> str:
    """``user`` (shared by every project) or ``project NAME``: whose the fact is, and the
    teammate who added it to a shared project (``from ROLE``)."""
    from ...projects import fact_project

    project = fact_project(dict(fact))
    teammate = f" from {fact['person']}" if fact.get("person") else ""
    return "user" if project is None else f"project {project}{teammate}"


def marked(fact: Mapping[str, Any], content: str) -> str:
    """The content, marked when the model stored the fact on its own."""
    return f"{SUGGESTION_MARK} {content}" if is_model_suggestion(dict(fact)) else content


@dataclass(frozen=True, repr=False)
class SearchResults(View):
    """Facts ranked for a query, each with its score."""

    query: str
    results: tuple[tuple[Mapping[str, Any], float], ...]
    nearest: Mapping[str, Any] | None = None  # the best fact below the relevance floor

    def table(self) -> Table:
        headers = ("rank", "score", "id", "category", "content", "scope")
        rows = [
            (
                i,
                f"{score:.3f}",
                f.get("id"),
                f.get("category"),
                short(f.get("content"), 80),
                scope_of(f),
            )
            for i, (f, score) in enumerate(self.results, 1)
        ]
        return Table(headers, rows, f"Search: {self.query!r}", self.empty)

    @property
    def empty(self) -> str:
        """Nothing matches, said plainly, with what to try and the nearest miss."""
        text = (
            f"Nothing stored matches {self.query!r}. Try fewer or other words, "
            "or list every fact with %memory facts."
        )
        if self.nearest is not None:
            fact = self.nearest
            text += (
                f" Nearest miss, not a match: {fact.get('id')}: {short(fact.get('content'), 80)}"
            )
        return text


@dataclass(frozen=True, repr=False)
class PreviewView(View):
    """The exact injected block, with its token count against the budget."""

    block: str
    tokens: int
    budget: int
    fact_count: int = 0

    @property
    def header(self) -> str:
        return f"{self.tokens} / {self.budget} tokens, {count_of(self.fact_count, 'fact')}"

    @property
    def body(self) -> str:
        return self.block or "(nothing would be injected)"

    def __str__(self) -> str:
        return clean_text(f"Memory preview: {self.header}\n{self.body}")

    def _repr_markdown_(self) -> str:
        block = code_block(clean_text(self.body), "text")
        return f"**Memory preview** — {md_cell(self.header)}\n\n{block}"

    def _repr_html_(self) -> str:
        body = self.body
        return (
            f"<p><b>Memory preview</b> — {escape_html(self.header)}</p>"
            f"<pre>{escape_html(body)}</pre>"
        )


def facts_view(
    facts: Iterable[Mapping[str, Any]], title: str = "Facts", total: int | None = None
) -> FactsTable:
    """Build a :class:`FactsTable` from any iterable of fact dicts (the first page of
    ``total`` when given)."""
    return FactsTable(tuple(facts), title, total)


def preview_view(
    memory: Memory,
    context: str | None,
    tokens: int | None,
    *,
    project: str | None = None,
) -> PreviewView:
    """The injected block and its exact token count in ``project`` (None: the user's facts
    only); shared by ``%memory preview`` and the panel (whose selector picks ``project``)."""
    from ...tokens import count_tokens

    budget = memory.settings.memory.max_injection_tokens if tokens is None else tokens
    block, chosen = memory.injection(context, max_tokens=budget, project=project)
    return PreviewView(block, count_tokens(block), budget, len(chosen))
