"""The user and history sections are injected in every project, so a fold in one project
writes no sentence there that says what that project's memory holds: a sentence restating
one of its facts (and none of the user's) or naming it is left out of the fold, with the
reason, and another project's turn never reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deerflow_nb.memory import Memory, empty_memory

CHURN_FACT = "Builds the churn model on the subscriptions table"
USER_FACT = "Prefers polars over pandas for dataframes"


def stored(content: str, **scope: str) -> dict[str, Any]:
    return {
        "id": f"fact_{abs(hash(content)) % 16**8:08x}",
        "content": content,
        "category": "context",
        "confidence": 0.9,
        "createdAt": "2026-03-01T00:00:00Z",
        "source": "manual",
        **scope,
    }


def memory(home: Path) -> Memory:
    data = empty_memory()
    data["facts"] = [stored(CHURN_FACT, scope="project", project="churn"), stored(USER_FACT)]
    (home / "memory.json").write_text(json.dumps(data), encoding="utf-8")
    return Memory(home)


def work_context(summary: str) -> dict[str, Any]:
    return {"user": {"workContext": {"summary": summary, "shouldUpdate": True}}}


def test_a_projects_fold_keeps_its_facts_out_of_the_shared_sections(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    leaked = "Builds the churn model on the subscriptions table."
    report = mem.apply(work_context(f"{leaked} Reads papers on Sundays."), project="churn")

    assert mem.data["user"]["workContext"]["summary"] == "Reads papers on Sundays."
    assert [(x["item"], x["value"]) for x in report.left_out] == [("user.workContext", leaked)]
    assert "shown in every project" in report.left_out[0]["reason"]
    assert "churn model" not in mem.preview("what do I work on", project="sales")


def test_the_changes_own_project_facts_count_and_the_project_name_does(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    diff = {
        **work_context(
            "Tunes the uplift thresholds weekly. Leads the Churn project. Reads papers."
        ),
        "newFacts": [
            {
                "content": "Tunes the uplift thresholds weekly",
                "category": "context",
                "confidence": 0.9,
                "scope": "project",
            }
        ],
    }
    report = mem.apply(diff, project="churn")

    assert mem.data["user"]["workContext"]["summary"] == "Reads papers."
    assert {x["value"] for x in report.left_out} == {
        "Tunes the uplift thresholds weekly.",
        "Leads the Churn project.",
    }


def test_what_the_user_said_stays_and_so_does_another_projects_fold(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    mem.apply(  # churn's memory says it too; the user's own fact makes it the user's
        {
            "newFacts": [
                {"content": USER_FACT, "category": "context", "confidence": 0.9, "scope": "project"}
            ]
        },
        project="churn",
    )
    assert USER_FACT in {f["content"] for f in mem.data["facts"] if f.get("project") == "churn"}
    mine = "Prefers polars over pandas for dataframes."
    report = mem.apply(work_context(mine), project="churn")
    assert mem.data["user"]["workContext"]["summary"] == mine
    assert report.left_out == []

    # a fold in sales reads none of churn's facts: what it was told there is its own
    said = "Said the churn model ships in May."
    report = mem.apply(work_context(said), project="sales")
    assert mem.data["user"]["workContext"]["summary"] == said
    assert report.left_out == []


def test_the_default_projects_name_is_a_word_like_any_other(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    summary = "Keeps the default settings of every library."
    report = mem.apply(work_context(summary))  # a fold with no project: ``default``'s

    assert mem.data["user"]["workContext"]["summary"] == summary
    assert report.left_out == []


def test_forgetting_a_project_takes_its_sentences_from_the_shared_sections(
    tmp_path: Path,
) -> None:
    data = empty_memory()
    data["facts"] = [stored(CHURN_FACT, scope="project", project="churn"), stored(USER_FACT)]
    data["user"]["workContext"] = {  # written before this rule, or by hand
        "summary": "Builds the churn model on the subscriptions table. Reads papers on Sundays."
    }
    (tmp_path / "memory.json").write_text(json.dumps(data), encoding="utf-8")
    mem = Memory(tmp_path)

    mem.projects.forget("churn")

    assert mem.data["user"]["workContext"]["summary"] == "Reads papers on Sundays."


def test_a_users_fact_naming_the_project_is_still_the_users(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    mem.apply(
        {"newFacts": [{"content": "Reviews churn dashboards daily", "confidence": 0.9}]},
        project="churn",
    )
    summary = "Reviews churn dashboards daily. Ships churn fixes on Fridays."
    report = mem.apply(work_context(summary), project="churn")

    kept = mem.data["user"]["workContext"]["summary"]  # composed again from your facts
    assert "Reviews churn dashboards daily." in kept and "Fridays" not in kept
    assert [x["value"] for x in report.left_out] == ["Ships churn fixes on Fridays."]
