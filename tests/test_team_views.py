"""Who shares what, in the views (issue 39, item 7): ``%memory projects`` marks a shared
project with its server, this home's role and its members (kept from the last sync, so
offline too); ``%memory history`` and the inspector's history say who made each change (a
teammate's role, or ``you``); the inspector's facts say who added each fact and who last
changed it. Hostile roles, people and facts stay text in the notebook and the inspector.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest
from hostile import HOSTILE_LINE, assert_inert
from IPython.core.interactiveshell import InteractiveShell
from test_inspector_apptest import facts_table, run_app, table
from test_team_postgres import Team, shared  # noqa: F401  (the fixture: a database per test)
from test_team_sharing import PROJECT, TARGET, member, pgpass  # noqa: F401

from deerflow_nb.memory import Memory
from deerflow_nb.notebook.session import get_session
from deerflow_nb.notebook.views.history import EventsView
from deerflow_nb.storage import outbox as rows

EDITED = "The target column is churned_60d"


def formatted(shell: InteractiveShell, obj: object) -> dict:
    data, _ = shell.display_formatter.format(obj)
    return data


def test_projects_history_and_inspector_name_the_team(
    shell: InteractiveShell,
    home: Path,
    shared: Team,  # noqa: F811
    pgpass: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = shared.suffix
    alice = Memory(tmp_path / "alice")
    fact = alice.add_fact(TARGET, project=PROJECT)
    alice.share(PROJECT, member(shared, pgpass, "alice"))
    member(shared, pgpass, "student", read_only=True)
    bob_url = member(shared, pgpass, "bob")
    shell.run_line_magic("memory", f"join {PROJECT} --url {bob_url}")
    get_session(shell).memory.team.stop_sync()  # this test syncs when it says so
    alice.facts.edit(fact["id"], EDITED)
    alice.sync()
    shell.run_line_magic("memory", "sync")
    shell.run_line_magic("memory", f"project {PROJECT}")
    shell.run_line_magic("memory", "add 'The churn notebook runs nightly'")

    def fail(*_: object, **__: object) -> None:
        raise AssertionError("the views read journal.db, never the server")

    monkeypatch.setattr(psycopg, "connect", fail)  # offline from here on
    view = shell.run_line_magic("memory", "projects")
    got = view.table()
    assert got.headers[-2:] == ("shared", "members")
    row = next(r for r in got.rows if r[0].startswith(PROJECT))
    assert row[-2] == f"{bob_url} as bob_{s}"
    assert row[-1] == f"alice_{s}, bob_{s}, student_{s} (read-only)"
    assert_inert(formatted(shell, view), "%memory projects")

    history = shell.run_line_magic("memory", "history").table()
    assert history.headers[4] == "by"
    by = {(r[2], r[5].split(" → ")[-1]): r[4] for r in history.rows}
    assert by[("add", TARGET)] == f"alice_{s}"
    assert any(k[0] == "update" and EDITED in k[1] for k, v in by.items() if v == f"alice_{s}")
    assert by[("add", "The churn notebook runs nightly")] == "you"

    at = run_app(home, monkeypatch)
    facts = facts_table(at).set_index("content")
    assert facts.loc[EDITED, "added by"] == f"alice_{s}"
    assert facts.loc[EDITED, "changed by"] == f"alice_{s}"
    assert facts.loc["The churn notebook runs nightly", "added by"] == "you"
    assert facts.loc[EDITED, "by"] == f"alice_{s}"  # added and changed by one person
    log = table(at, "kind", "fact", "by", "change")
    assert set(log["by"]) == {f"alice_{s}", "you"}
    alice.close()


def test_hostile_roles_people_and_facts_stay_text(
    shell: InteractiveShell, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = get_session(shell).memory
    person = "**loud** <img src=http://127.0.0.1:9/x>"
    hostile = {
        "id": "fact_evil", "content": HOSTILE_LINE, "category": "context", "confidence": 0.9,
        "createdAt": "2026-11-28T10:00:00Z", "source": "team", "scope": "project",
        "project": "course", "person": person,
    }  # fmt: skip
    path = home.parent / "hostile.json"
    path.write_text(json.dumps({"version": "1.0", "facts": [hostile]}))
    mem.import_(path)
    with mem.journal.transaction() as db:  # as a (hostile) server's member list would be kept
        rows.set_shared(
            db,
            "course",
            {
                "url": f"postgresql://{HOSTILE_LINE}@db/x",
                "role": HOSTILE_LINE,
                "read_only": True,
                "members": [{"role": HOSTILE_LINE, "read_only": False}],
            },
        )
    projects = shell.run_line_magic("memory", "projects")
    assert_inert(formatted(shell, projects), "projects")
    assert "<script>alert(2)</script>" in str(projects)  # shown, as text
    event = {
        "id": 1, "ts": "2026-11-28T10:00:00Z", "kind": "update", "fact_id": "fact_1",
        "old_content": HOSTILE_LINE, "new_content": HOSTILE_LINE, "source": "team:x",
        "details": {"person": HOSTILE_LINE},
    }  # fmt: skip
    assert_inert(formatted(shell, EventsView((event,))), "history")
    assert "<script>alert(2)</script>" in str(EventsView((event,)))

    at = run_app(home, monkeypatch)
    assert list(facts_table(at)["added by"]) == [person]  # a table cell: text
    raw = "\n".join(m.value for m in at.markdown)
    assert not re.search(r"(?<!\\)<img", raw) and "**loud**" not in raw
