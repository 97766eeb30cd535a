"""The doctor's report: ``Check`` rows and ``DoctorReport``, the ✓/✗ table with fixes.

It reads as terminal text or escaped Markdown/HTML (model and server text is untrusted).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from ..scrub import redact
from ..untrusted import clean_text, escape_html, escape_markdown

OK, FAIL, UNKNOWN = "✓", "✗", "?"


@dataclass(frozen=True)
class Check:
    """One row: which model, what was checked, ✓/✗/?, what was seen, and what to change."""

    target: str
    name: str
    status: str
    detail: str
    fix: str = ""
    config: bool = False  # a ✗ of the configuration itself, not of a model: exit status 1

    def __post_init__(self) -> None:
        for name in ("target", "detail", "fix"):  # a server may echo the key in any reply
            # A model's text may hold entities (``&lt;``, copied from a prompt): shown as
            # the characters they stand for; the HTML view escapes them once, itself.
            object.__setattr__(self, name, redact(html.unescape(getattr(self, name))))

    @property
    def failed(self) -> bool:
        return self.status == FAIL


@dataclass
class DoctorReport:
    """The checks in order; ``str()`` is the terminal table, the ``_repr_*_`` are escaped."""

    title: str
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    providers: list[str] = field(default_factory=list)  # llm.registry.described()

    def __post_init__(self) -> None:
        self.title = redact(self.title)  # it names the base URL, user:pass@ and all

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.failed]

    @property
    def exit_status(self) -> int:
        """``deerflow-nb doctor``'s: 1 when a setting cannot be used as written (a
        ``memory.embeddings`` that cannot load), else 0 (a model's ✗ is its own, said)."""
        return 1 if any(c.failed and c.config for c in self.checks) else 0

    def summary(self) -> str:
        passed = sum(c.status == OK for c in self.checks)
        unknown = sum(c.status == UNKNOWN for c in self.checks)
        text = f"{passed} of {len(self.checks)} checks passed"
        if unknown:
            text += f", {unknown} unknown"
        return f"{text} ({self.seconds:.1f} s)."

    def __str__(self) -> str:
        rows = [(c.target, c.name, f"{c.status} {clean_text(c.detail)}") for c in self.checks]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(_HEADERS[:2])]
        lines = [clean_text(self.title), ""]
        head = "  ".join(h.ljust(w) for h, w in zip(_HEADERS[:2], widths, strict=True))
        lines.append(f"  {head}  result")
        indent = 2 + sum(widths) + 4
        for check, row in zip(self.checks, rows, strict=True):
            cells = "  ".join(cell.ljust(w) for cell, w in zip(row[:2], widths, strict=True))
            lines.append(f"  {cells}  {row[2]}".rstrip())
            if check.fix:
                lines.append(" " * indent + "→ " + clean_text(check.fix))
        lines += ["", "Model providers:", *(f"  {clean_text(p)}" for p in self.providers)]
        lines += ["", self.summary()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        lines = [f"**{escape_markdown(self.title)}**", "", "| " + " | ".join(_HEADERS) + " |"]
        lines.append("|---|---|---|---|")
        for c in self.checks:
            cells = (c.target, c.name, f"{c.status} {c.detail}", c.fix)
            lines.append("| " + " | ".join(escape_markdown(x) for x in cells) + " |")
        lines += ["", "Model providers:", ""] + [f"- {escape_markdown(p)}" for p in self.providers]
        lines += ["", escape_markdown(self.summary())]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        providers = "".join(f"<li>{escape_html(p)}</li>" for p in self.providers)
        head = "".join(f"<th>{h}</th>" for h in _HEADERS)
        body = "".join(
            "<tr>"
            + "".join(
                f"<td>{escape_html(x)}</td>"
                for x in (c.target, c.name, f"{c.status} {c.detail}", c.fix)
            )
            + "</tr>"
            for c in self.checks
        )
        return (
            f"<p><strong>{escape_html(self.title)}</strong></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<p>Model providers:</p><ul>{providers}</ul>"
            f"<p>{escape_html(self.summary())}</p>"
        )


_HEADERS = ("model", "check", "result", "what to change")
