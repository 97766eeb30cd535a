"""The ``<memory>`` block: DeerFlow's sections, facts ranked for the turn, an exact token budget.

Layout (DeerFlow's order and labels; empty sections are left out)::

    <memory>
    User Context:
    - Work: …
    - Personal: …
    - Current Focus: …

    History:
    - Recent: …
    - Earlier: …
    - Background: …

    Facts:
    - [preference | 0.92 | 2026-03-01] Prefers polars over pandas
    </memory>

The whole string, tags included, never exceeds ``max_tokens`` counted with ``cl100k_base``.
Summaries come first, as in DeerFlow; if they alone would not fit they are shortened, never
the budget broken. Facts then fill what is left in rank order (see ``ranking``); a fact
whose line does not fit is skipped and the next one tried, so the order of the listed facts
is always the ranking order. Every text from memory is escaped (``&``, ``<``, ``>`` become
entities; line breaks become spaces), so no fact or summary can close or forge a tag or
add a line of its own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..tokens import count_tokens, truncate_to_tokens
from .ranking import Context, FactIndex, Scores, coerce_confidence, get_index, score

if TYPE_CHECKING:
    from .embeddings import Embedder

OPEN_TAG = "<memory>"
CLOSE_TAG = "</memory>"
FACTS_HEADER = "Facts:"
USER_FIELDS = (
    ("workContext", "Work"),
    ("personalContext", "Personal"),
    ("topOfMind", "Current Focus"),
)
HISTORY_FIELDS = (
    ("recentMonths", "Recent"),
    ("earlierContext", "Earlier"),
    ("longTermBackground", "Background"),
)
# A fact line never costs less than this ("- [x | 0.00] y"): below it, stop looking.
_MIN_LINE_TOKENS = 8
# After this many facts in a row that do not fit, the rest will not either (in practice).
_MAX_MISSES = 64
_SPACE_RE = re.compile(r"\s+")
_CATEGORY_RE = re.compile(r"[^\w-]+")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}")

Section = tuple[str, list[tuple[str, str]]]


def escape(text: str) -> str:
    """One line of inert text: entities for ``& < >``, whitespace runs to one space."""
    text = _SPACE_RE.sub(" ", text).strip()
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fact_line(fact: dict[str, Any]) -> str:
    """``- [category | confidence | date] content``; the date is left out when unknown."""
    category = _CATEGORY_RE.sub("", str(fact.get("category") or "context")) or "context"
    head = f"{category} | {coerce_confidence(fact.get('confidence')):.2f}"
    created = _DATE_RE.match(str(fact.get("createdAt") or ""))
    if created:
        head += f" | {created.group(0)}"
    return f"- [{head}] {escape(fact['content'])}"


def _summaries(memory_data: dict[str, Any]) -> list[Section]:
    sections: list[Section] = []
    for key, title, fields in (
        ("user", "User Context:", USER_FIELDS),
        ("history", "History:", HISTORY_FIELDS),
    ):
        group = memory_data.get(key)
        if not isinstance(group, dict):
            continue
        items = []
        for field_name, label in fields:
            entry = group.get(field_name)
            summary = entry.get("summary") if isinstance(entry, dict) else None
            if isinstance(summary, str) and escape(summary):
                items.append((label, escape(summary)))
        if items:
            sections.append((title, items))
    return sections


def _render(sections: list[Section], fact_lines: list[str]) -> str:
    blocks = [
        title + "\n" + "\n".join(f"- {label}: {text}" for label, text in items)
        for title, items in sections
        if items
    ]
    if fact_lines:
        blocks.append(FACTS_HEADER + "\n" + "\n".join(fact_lines))
    if not blocks:
        return ""
    return f"{OPEN_TAG}\n" + "\n\n".join(blocks) + f"\n{CLOSE_TAG}"


def _fit_summaries(sections: list[Section], max_tokens: int) -> list[Section]:
    """Shorten summaries (the longest first) until the block without facts fits."""
    if count_tokens(_render(sections, [])) <= max_tokens:
        return sections
    texts = {
        (s, i): text for s, (_, items) in enumerate(sections) for i, (_, text) in enumerate(items)
    }
    allow = {key: count_tokens(text) for key, text in texts.items()}
    # Water-fill the room left after the frame, then trim exactly until the whole fits.
    frame = count_tokens(
        _render([(t, [(label, "x") for label, _ in items]) for t, items in sections], [])
    )
    room = max(max_tokens - frame, 0)
    for n, key in enumerate(sorted(allow, key=allow.get)):
        allow[key] = min(allow[key], room // (len(allow) - n))
        room -= allow[key]

    def shortened() -> list[Section]:
        out = []
        for s, (title, items) in enumerate(sections):
            kept = []
            for i, (label, _) in enumerate(items):
                text = truncate_to_tokens(texts[(s, i)], allow[(s, i)]) if allow[(s, i)] > 0 else ""
                if text:
                    kept.append((label, text))
            out.append((title, kept))
        return out

    current = shortened()
    while allow and (excess := count_tokens(_render(current, [])) - max_tokens) > 0:
        longest = max(allow, key=allow.get)
        if allow[longest] <= 0:
            return []
        allow[longest] = max(allow[longest] - max(excess, 1), 0)
        current = shortened()
    return current if count_tokens(_render(current, [])) <= max_tokens else []


def _line(index: FactIndex, facts: list[dict[str, Any]], i: int) -> tuple[str, int]:
    cached = index.line_cache.get(i)
    if cached is None:
        line = fact_line(facts[i])
        cached = index.line_cache[i] = (line, count_tokens("\n" + line))
    return cached


def _compose(
    memory_data: dict[str, Any] | None,
    max_tokens: int,
    context: Context,
    embedder: Embedder | None,
) -> tuple[str, list[dict[str, Any]], list[int], FactIndex, Scores]:
    """The block, the usable facts, the positions of those it lists (in order), and why."""
    data = memory_data if isinstance(memory_data, dict) else {}
    facts, index = get_index(data)
    scores = score(index, context, embedder)
    sections = _fit_summaries(_summaries(data), max_tokens)
    if not facts:
        return _render(sections, []), facts, [], index, scores
    # The block with an empty Facts section; each line then adds its own cost.
    used = count_tokens(_render(sections, [""])) - 1  # the first line's "\n" is in its cost
    chosen: list[int] = []
    misses = 0
    for i in scores.order:
        if max_tokens - used < _MIN_LINE_TOKENS or misses > _MAX_MISSES:
            break
        _, cost = _line(index, facts, int(i))
        if used + cost <= max_tokens:
            chosen.append(int(i))
            used += cost
            misses = 0
        else:
            misses += 1
    # Line costs are counted alone; joined text can tokenize a little differently, so
    # the final string is counted exactly and trimmed from the lowest-ranked end.
    text = _render(sections, [_line(index, facts, i)[0] for i in chosen])
    total = count_tokens(text)
    while chosen and total > max_tokens:
        chosen.pop()
        text = _render(sections, [_line(index, facts, i)[0] for i in chosen])
        total = count_tokens(text)
    if total > max_tokens:
        return "", facts, [], index, scores
    return text, facts, chosen, index, scores


def format_memory_for_injection(
    memory_data: dict[str, Any] | None,
    max_tokens: int = 2000,
    context: Context = None,
    *,
    embedder: Embedder | None = None,
) -> str:
    """The ``<memory>…</memory>`` block for the system prompt, tags included, within budget.

    ``context`` is the turn: a string, or a list of texts whose last item is the current
    user message (earlier items, the recent turns, count half). Without context the facts
    come in DeerFlow's confidence order. Returns "" when there is nothing to inject.
    """
    return _compose(memory_data, max_tokens, context, embedder)[0]


def select_facts(
    memory_data: dict[str, Any] | None,
    context: Context = None,
    max_tokens: int = 2000,
    *,
    embedder: Embedder | None = None,
) -> list[dict[str, Any]]:
    """The facts ``format_memory_for_injection`` lists for the same arguments, in its order."""
    _, facts, chosen, _, _ = _compose(memory_data, max_tokens, context, embedder)
    return [facts[i] for i in chosen]


def explain_selection(
    memory_data: dict[str, Any] | None,
    context: Context = None,
    max_tokens: int = 2000,
    *,
    embedder: Embedder | None = None,
) -> list[dict[str, Any]]:
    """Why each injected fact is there: its rank and score parts, in injection order.

    ``relevance`` fuses ``lexical`` (BM25, normalised per query) and ``dense`` (cosine, or
    None without embeddings); ``score`` adds the confidence and recency priors. With no
    context, relevance is 0 and the score is the confidence.
    """
    _, facts, chosen, index, scores = _compose(memory_data, max_tokens, context, embedder)
    rank_of = {int(i): r for r, i in enumerate(scores.order, start=1)}
    return [
        {
            "fact": facts[i],
            "rank": rank_of[i],
            "relevance": float(scores.relevance[i]),
            "lexical": float(scores.lexical[i]),
            "dense": None if scores.dense is None else float(scores.dense[i]),
            "confidence": float(index.confidence[i]),
            "recency": float(index.recency[i]),
            "score": float(scores.total[i]),
        }
        for i in chosen
    ]


def rank_facts(
    memory_data: dict[str, Any] | None, query: str, *, embedder: Embedder | None = None
) -> list[tuple[dict[str, Any], float]]:
    """Facts matching ``query`` (lexically, or any fact when embeddings are on), best first.

    An empty query lists every fact in confidence order, scored by its confidence.
    """
    facts, index = get_index(memory_data if isinstance(memory_data, dict) else {})
    scores = score(index, query, embedder)
    if not query or not query.strip():
        return [(facts[int(i)], float(index.confidence[int(i)])) for i in scores.order]
    matched = scores.lexical > 0
    if scores.dense is not None:
        matched |= scores.dense > 0
    return [(facts[int(i)], float(scores.total[int(i)])) for i in scores.order if matched[i]]
