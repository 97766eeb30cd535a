"""``%memory projects``: every project with its facts, threads and last use; a shared one
with its server, this home's role and its members (as the last sync saw them: offline)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...shared.connect import without_password
from .table import Table, View, day, short


@dataclass(frozen=True, repr=False)
class ProjectsTable(View):
    """One row per project; the active one marked; shared ones with server and members."""

    projects: tuple[Mapping[str, Any], ...]
    active: str | None = None
    shared: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def table(self) -> Table:
        headers: tuple[str, ...] = ("project", "facts", "threads", "last used", "summary")
        listed = list(self.projects)
        known = {p["name"] for p in listed}
        listed += [{"name": name} for name in sorted(self.shared) if name not in known]
        rows = []
        for p in listed:
            row: tuple[str, ...] = (
                f"{p['name']} (this notebook)" if p["name"] == self.active else p["name"],
                str(p.get("facts", 0)),
                str(p.get("threads", 0)),
                day(p.get("last_used")) or "never",
                short(p.get("summary") or "", 60),
            )
            if self.shared:
                row += shared_cells(self.shared.get(p["name"]))
            rows.append(row)
        if self.shared:
            headers += ("shared", "members")
        return Table(headers, rows, f"Projects ({len(rows)})", "No projects yet.")


def shared_cells(entry: Mapping[str, Any] | None) -> tuple[str, str]:
    """A shared project's server and this home's role (never a password: none is stored),
    and its members with their roles; two empty cells for a project of this home only."""
    if not entry:
        return "", ""
    role = entry.get("role")
    mode = " (read-only)" if entry.get("read_only") else ""
    server = without_password(str(entry.get("url") or "")) + (f" as {role}{mode}" if role else "")
    members = entry.get("members")
    if not isinstance(members, list):
        return server, "not synced yet"
    names = [
        f"{m.get('role')}" + (" (read-only)" if m.get("read_only") else "")
        for m in members
        if isinstance(m, Mapping)
    ]
    return server, ", ".join(names)
