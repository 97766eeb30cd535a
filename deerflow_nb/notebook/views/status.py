"""Views of memory's state: ``%memory status``, the bare ``%memory`` summary, a flush's outcome."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...memory import fold_summary
from ...schema.constants import SECTION_LABELS
from ...untrusted import clean_text, escape_html
from .table import Table, View, count_of, day, md_cell

SECTIONS: tuple[tuple[str, str, str], ...] = tuple(
    (group, name, label) for (group, name), label in SECTION_LABELS.items()
)


@dataclass(frozen=True, repr=False)
class StatusView(View):
    """The queue, the last fold, the last error and where the files are."""

    status: Mapping[str, Any]

    def table(self) -> Table:
        rows = []
        for key, value in self.status.items():
            if key == "pending" and isinstance(value, list):
                queued = [
                    f"{r.get('thread_id')} ({r.get('status')}, {r.get('attempts') or 0} attempts"
                    + (f", {r['claim']})" if r.get("claim") else ")")
                    for r in value
                ]
                rows.append(("queued threads", "; ".join(queued) or "none"))
            elif key == "last_fold":
                fold = value if isinstance(value, Mapping) else {}
                summary = fold_summary(fold or None)
                rows.append(
                    ("last fold", f"{day(fold.get('at'))} {summary}".strip() if value else "never")
                )
                for item in fold.get("left_out") or []:
                    rows.append(("  left out", f"{item.get('item')}: {item.get('reason')}"))
            elif key == "model_providers" and isinstance(value, list):
                rows.append(("model providers", ", ".join(map(str, value)) or "none"))
            elif key == "consecutive_failures":
                why = failures_line(self.status)
                rows.append((key, str(value or 0) + (f" ({why})" if why else "")))
            else:
                rows.append((key, _format_value(value)))
        return Table(("key", "value"), rows, "Memory status", "No status.")


def flush_summary(report: Any) -> str:
    """``Memory.flush``'s report in one sentence."""
    folded = list(getattr(report, "folded", []) or [])
    proposed = list(getattr(report, "proposed", []) or [])
    failed = dict(getattr(report, "failed", {}) or {})
    parts = [f"folded {count_of(len(folded), 'thread')}"]
    if folded:
        parts[0] += f" ({', '.join(folded)})"
    if proposed:
        parts.append(f"proposed for review: {', '.join(proposed)}")
    parts.extend(f"failed {tid}: {err}" for tid, err in failed.items())
    parts.append(f"{getattr(report, 'pending', 0)} still queued")
    return "Flushed: " + "; ".join(parts)


def _format_value(value: Any) -> str:
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, default=str, ensure_ascii=False)
    return "" if value is None else str(value)


def failures_line(status: Mapping[str, Any]) -> str | None:
    """A line when the memory model failed several folds in a row, else None."""
    count = int(status.get("consecutive_failures") or 0)
    if count < 2:
        return None
    return (
        f"the memory model failed the last {count} folds in a row; check the last error, "
        "memory.model_name and the server"
    )


@dataclass(frozen=True, repr=False)
class SummaryView(View):
    """``%memory`` in a terminal: the six summaries, fact counts and the queue."""

    data: Mapping[str, Any]
    status: Mapping[str, Any] = field(default_factory=dict)

    def _profile(self) -> list[tuple[str, str]]:
        out = []
        for group, key, label in SECTIONS:
            section = (self.data.get(group) or {}).get(key) or {}
            out.append((label, section.get("summary") or ""))
        return out

    def _counts(self) -> str:
        facts = self.data.get("facts") or []
        by_cat: dict[str, int] = {}
        for fact in facts:
            by_cat[fact.get("category", "?")] = by_cat.get(fact.get("category", "?"), 0) + 1
        detail = ", ".join(f"{c} {n}" for c, n in sorted(by_cat.items()))
        return count_of(len(facts), "fact") + (f" ({detail})" if detail else "")

    def __str__(self) -> str:
        lines = [f"Memory — {self._counts()}, updated {self.data.get('lastUpdated') or 'never'}"]
        lines.extend(f"  {label}: {text or '—'}" for label, text in self._profile())
        if self.status:
            lines.append("  " + status_line(self.status))
        lines.append("Run %memory --help for commands.")
        return clean_text("\n".join(lines))

    def _repr_markdown_(self) -> str:
        lines = [f"**Memory** — {md_cell(self._counts())}", ""]
        lines.extend(f"- **{label}:** {md_cell(text) or '—'}" for label, text in self._profile())
        if self.status:
            lines += ["", md_cell(status_line(self.status))]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        items = "".join(
            f"<li><b>{escape_html(label)}:</b> {escape_html(text) or '—'}</li>"
            for label, text in self._profile()
        )
        extra = f"<p>{escape_html(status_line(self.status))}</p>" if self.status else ""
        return f"<p><b>Memory</b> — {escape_html(self._counts())}</p><ul>{items}</ul>{extra}"


def status_line(status: Mapping[str, Any]) -> str:
    parts = [f"queued threads: {len(status.get('pending') or [])}"]
    if status.get("pending_changes"):
        parts.append(f"changes awaiting review: {status['pending_changes']}")
    last = status.get("last_fold")
    parts.append(f"last fold: {fold_summary(last if isinstance(last, Mapping) else None)}")
    if failures_line(status):
        parts.append(str(failures_line(status)))
    if status.get("last_error"):
        parts.append(f"last error: {status['last_error']}")
    return ", ".join(parts)
