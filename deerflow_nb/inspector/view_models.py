"""The inspector's pure view models: table rows, chart series and diffs.

Built from what ``data`` read: plain lists and dicts in and out; pandas only in ``frame``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import memory
from ..memory import (
    FactQuery,
    FactSort,
    Scope,
    added_by,
    changed_by,
    project_names,
)
from ..projects import fact_project
from ..schema.constants import (
    HISTORY_SECTIONS,
    SUGGESTION_MARK,
    USER_SECTIONS,
    is_model_suggestion,
)

if TYPE_CHECKING:
    import pandas as pd

SECTIONS = {"user": USER_SECTIONS, "history": HISTORY_SECTIONS}
SORTS: dict[str, tuple[FactSort, bool]] = {  # label -> FactQuery's sort, descending
    "confidence (high first)": ("confidence", True),
    "newest first": ("created", True),
    "oldest first": ("created", False),
    "category": ("category", False),
    "content": ("content", False),
}
#: How much of a fact's text names it in the confidence chart's legend and picker.
FACT_LABEL_CHARS = 90
#: How much of a message the turn, transcript and recall tables show in a cell.
EXCERPT_CHARS = 160
#: The project selector's choices besides each project (a project name cannot hold
#: parentheses, so these never clash with one): every fact, or the user's own only.
ALL_PROJECTS = "(all)"
USER_ONLY = "(user only)"
#: What the facts table's ``project`` column says of the user's own facts.
USER_SCOPE = "(user)"
#: memory_events kinds that take a fact out of memory (rollback, import and reset events
#: say so by their fields instead: an old confidence and no new one).
REMOVAL_KINDS = frozenset({"remove", "evict"})


def fact_rows(
    memory: dict[str, Any] | None,
    *,
    categories: list[str] | None = None,
    confidence: tuple[float, float] = (0.0, 1.0),
    text: str = "",
    sort: str = "confidence (high first)",
    project: str = ALL_PROJECTS,
    changers: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The facts table: filtered by project (``project_choices``: one project's facts come
    with the user's, never another project's), category, confidence range and text, then
    sorted (the one fact query, ``FactQuery``); who added each fact and who last changed
    it (``changers``: the reader's ``changed_by``)."""
    key, descending = SORTS.get(sort, SORTS["confidence (high first)"])
    query = FactQuery(
        categories=tuple(categories or ()),
        min_confidence=confidence[0],
        max_confidence=confidence[1],
        text=text,
        sort=key,
        descending=descending,
        scope=chosen_scope(project),
    )
    rows = []
    for fact in query.run((memory or {}).get("facts", [])):
        rows.append(
            {
                "id": fact.get("id", ""),
                "content": fact.get("content", ""),
                "project": fact_project(fact) or USER_SCOPE,
                "category": fact.get("category", ""),
                "added by": (added := added_by(fact)),
                "changed by": (changed := (changers or {}).get(str(fact.get("id")), "")),
                "by": added if changed in ("", added) else f"{added} → {changed}",
                "confidence": round(float(fact.get("confidence") or 0.0), 3),
                "source": " ".join(
                    [str(fact.get("source", ""))]
                    + ([SUGGESTION_MARK] if is_model_suggestion(fact) else [])
                ),
                "createdAt": fact.get("createdAt", ""),
                "updatedAt": fact.get("updatedAt", ""),
            }
        )
    return rows


def project_choices(memory: dict[str, Any] | None, *, everything: bool = True) -> list[str]:
    """The project selector's options: ``ALL_PROJECTS`` (with ``everything``), ``USER_ONLY``,
    then every project memory.json knows, by name."""
    names = sorted(project_names(memory or {}))
    return [*([ALL_PROJECTS] if everything else []), USER_ONLY, *names]


def chosen_scope(project: str | None) -> Scope:
    """The scope a ``project_choices`` option names: every project's facts, the user's
    only, or the user's and that project's (None: the user's only)."""
    if project == ALL_PROJECTS:
        return Scope.everywhere()
    return Scope.of(None if project == USER_ONLY else project)


def section_rows(
    memory: dict[str, Any] | None, project: str = ALL_PROJECTS
) -> list[dict[str, str]]:
    """The user/history summaries that are filled in, in DeerFlow's order, then the
    projects' context summaries (only the chosen project's when one is chosen)."""
    rows = []
    for group, names in SECTIONS.items():
        block = (memory or {}).get(group) or {}
        for name in names:
            section = block.get(name) or {}
            if section.get("summary"):
                rows.append(
                    {
                        "section": f"{group}.{name}",
                        "summary": section["summary"],
                        "updatedAt": section.get("updatedAt", ""),
                    }
                )
    for name, entry in sorted(((memory or {}).get("projects") or {}).items()):
        if project not in (ALL_PROJECTS, name) or not isinstance(entry, dict):
            continue
        if isinstance(entry.get("summary"), str) and entry["summary"]:
            rows.append(
                {
                    "section": f"project {name}",
                    "summary": entry["summary"],
                    "updatedAt": str(entry.get("updatedAt") or ""),
                }
            )
    return rows


def turn_project(project: str | None) -> str | None:
    """The project a turn runs in for a ``project_choices`` option (``USER_ONLY``: none)."""
    return None if project == USER_ONLY else project


def injection_preview(block: str, why: list[dict[str, Any]], seen: int) -> dict[str, Any]:
    """What ``MemoryReader.explain`` gives, for the page: the exact block a turn injects,
    its token count, and why each fact is in it, the ``seen`` facts of the turn's scope
    (the user's and its project's) ranked together as the turn ranks them.

    ``facts`` lists each injected fact, in the block's order, with the score parts the
    ranking gave it: relevance (lexical BM25 fused with dense similarity when embeddings
    are on, plus the date match when the context names a date), confidence, recency,
    specificity, and the total.
    """
    from ..tokens import count_tokens

    return {
        "block": block,
        "tokens": count_tokens(block) if block else 0,
        "facts": [
            {
                "rank": w["rank"],
                "id": w["fact"].get("id", ""),
                "content": w["fact"].get("content", ""),
                "relevance": round(w["relevance"], 3),
                "lexical": round(w["lexical"], 3),
                "dense": None if w["dense"] is None else round(w["dense"], 3),
                "confidence": round(w["confidence"], 3),
                "recency": round(w["recency"], 3),
                "specificity": round(w["specificity"], 3),
                "total": round(w["score"], 3),
            }
            for w in why
        ],
        "total_facts": seen,
    }


def confidence_series(event_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per fact event: its confidence then, and whether it was added, changed or removed.

    A removal is plotted at the confidence the fact had when it left, so each fact's line
    ends where it was dropped.
    """
    labels: dict[str, str] = {}
    for ev in event_rows:
        if ev.get("fact_id"):
            # A fact's own text: a removal (a merge's too, whose new_content is the text it
            # was merged into) names the fact by the text it had.
            gone = ev.get("kind") in REMOVAL_KINDS or ev.get("new_confidence") is None
            content = ev.get("old_content") if gone else ev.get("new_content")
            if content:
                labels[ev["fact_id"]] = content
    last: dict[str, float] = {}
    points = []
    for ev in event_rows:
        fid = ev.get("fact_id")
        if not fid:
            continue
        kind = ev.get("kind") or ""
        old, new = ev.get("old_confidence"), ev.get("new_confidence")
        if kind in REMOVAL_KINDS or (new is None and old is not None):
            mark, conf = "removed", old
        elif kind == "add" or (old is None and new is not None):
            mark, conf = "added", new
        else:
            mark, conf = "changed", new
        if conf is None:
            conf = last.get(fid)
        if conf is None:
            continue
        last[fid] = float(conf)
        label = labels.get(fid, fid)
        points.append(
            {
                "ts": ev.get("ts"),
                "fact_id": fid,
                "fact": f"{fid}: {short(label, FACT_LABEL_CHARS)}",
                "confidence": float(conf),
                "event": mark,
                "kind": kind,
                "source": ev.get("source") or "",
            }
        )
    return points


def dodge(points: list[dict[str, Any]], step: float = 9.0) -> list[dict[str, Any]]:
    """The points with ``offset``: pixels to shift each sideways so that points of the
    same minute and confidence (a fold adds several facts at once) sit side by side
    instead of on top of each other (0, +step, -step, +2 step, ...)."""
    seen: dict[tuple[str, float], int] = {}
    out = []
    for p in points:
        spot = (str(p.get("ts") or "")[:16], round(float(p["confidence"]), 2))
        n = seen.get(spot, 0)
        seen[spot] = n + 1
        out.append({**p, "offset": step * ((n + 1) // 2) * (1 if n % 2 else -1)})
    return out


def event_rows(event_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The event log, newest first: when, what kind, which fact, what changed."""

    def conf(value: Any) -> str:
        return "–" if value is None else f"{float(value):.2f}"

    rows = []
    for ev in reversed(event_rows):
        old, new = ev.get("old_content"), ev.get("new_content")
        change = f"{old} → {new}" if old and new and old != new else new or old or ""
        before, after = ev.get("old_confidence"), ev.get("new_confidence")
        rows.append(
            {
                "time": ev.get("ts") or "",
                "kind": ev.get("kind") or "",
                "fact": ev.get("fact_id") or "",
                "project": ev.get("project") or USER_SCOPE,
                "by": changed_by(ev),
                "change": short(change, 300),
                "confidence": conf(after)
                if before is None or before == after
                else f"{conf(before)} → {conf(after)}",
                "source": ev.get("source") or "",
            }
        )
    return rows


def recall_rows(results: list[dict[str, Any]], query: str = "") -> list[dict[str, Any]]:
    """``Memory.recall`` results for the results list: thread, date, role, excerpt (around
    the words matching ``query``), score."""
    return [
        {
            "thread": r.get("thread") or "",
            "seq": r.get("seq"),
            "date": r.get("created_at") or "",
            "role": r.get("role") or "",
            "excerpt": memory.excerpt(str(r.get("content") or ""), query, EXCERPT_CHARS * 2),
            "score": round(float(r.get("score") or 0.0), 3),
        }
        for r in results
    ]


def short(text: Any, limit: int) -> str:
    """One line of at most ``limit`` characters (an ellipsis marks a cut)."""
    line = " ".join(str(text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def diff_snapshots(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What changed from ``old`` to ``new``: facts added, removed, changed, sections rewritten."""
    old_facts = {f.get("id"): f for f in old.get("facts", [])}
    new_facts = {f.get("id"): f for f in new.get("facts", [])}
    changed = []
    for fid in old_facts.keys() & new_facts.keys():
        before, after = old_facts[fid], new_facts[fid]
        for field in ("content", "category", "confidence"):
            if before.get(field) != after.get(field):
                changed.append(
                    {"id": fid, "field": field, "old": before.get(field), "new": after.get(field)}
                )
    sections = []
    for group, names in SECTIONS.items():
        for name in names:
            before = ((old.get(group) or {}).get(name) or {}).get("summary", "")
            after = ((new.get(group) or {}).get(name) or {}).get("summary", "")
            if before != after:
                sections.append({"section": f"{group}.{name}", "old": before, "new": after})

    def brief(f: dict[str, Any]) -> dict[str, Any]:
        keys = ("id", "content", "category", "confidence")
        return {k: f.get(k) for k in keys}

    return {
        "added": [brief(f) for fid, f in new_facts.items() if fid not in old_facts],
        "removed": [brief(f) for fid, f in old_facts.items() if fid not in new_facts],
        "changed": sorted(changed, key=lambda c: (str(c["id"]), c["field"])),
        "sections": sections,
    }


def frame(rows: list[dict[str, Any]], time_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A DataFrame for st.dataframe or a chart, with ISO timestamps parsed."""
    import pandas as pd

    df = pd.DataFrame(rows)
    for column in time_columns:
        if column in df:
            df[column] = pd.to_datetime(df[column], utc=True, format="ISO8601", errors="coerce")
    return df
