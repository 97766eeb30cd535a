"""``%memory projects``: every project with its facts, threads and last use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .table import Table, View, day, short


@dataclass(frozen=True, repr=False)
class ProjectsTable(View):
    """One row per project; the active one marked."""

    projects: tuple[Mapping[str, Any], ...]
    active: str | None = None

    def table(self) -> Table:
        headers = ("project", "facts", "threads", "last used", "summary")
        rows = [
            (
                f"{p['name']} (this notebook)" if p["name"] == self.active else p["name"],
                str(p.get("facts", 0)),
                str(p.get("threads", 0)),
                day(p.get("last_used")) or "never",
                short(p.get("summary") or "", 60),
            )
            for p in self.projects
        ]
        return Table(headers, rows, f"Projects ({len(rows)})", "No projects yet.")
