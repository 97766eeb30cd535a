"""One gate for every change to memory (issue 26): each finding, tried as an attacker would,
through the public surface (``Memory``, ``%memory``, ``MemoryTools``, the agent over HTTP
with a scripted model behind the loopback server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from journal_rows import journal_turn
from loopback import ServerHandle

from deerflow_nb import Agent, Memory
from deerflow_nb.agent.memory_tools import MemoryTools
from deerflow_nb.llm.base import ChatResult, ToolCall, Usage
from deerflow_nb.memory.updates.gate import MAX_REMEMBER_PER_TURN
from deerflow_nb.memory.updates.updater import wipe_limit
from deerflow_nb.schema.constants import is_model_suggestion, is_user_fact

TOPICS = (
    "polars",
    "pandas",
    "duckdb",
    "spark",
    "arrow",
    "numpy",
    "scipy",
    "sklearn",
    "torch",
    "jax",
    "keras",
    "xgboost",
    "lightgbm",
    "catboost",
    "statsmodels",
    "seaborn",
    "plotly",
    "altair",
    "bokeh",
    "dash",
    "streamlit",
    "flask",
    "fastapi",
    "django",
    "celery",
    "redis",
    "kafka",
    "airflow",
    "dagster",
    "prefect",
    "dbt",
    "snowflake",
    "bigquery",
    "redshift",
    "postgres",
    "mysql",
    "sqlite",
    "mongo",
    "neo4j",
    "elastic",
)


def seed(mem: Memory, by_hand: int, organic: int, path: Path) -> tuple[list[str], list[str]]:
    """``by_hand`` facts added with ``%memory add``'s path and ``organic`` facts a fold
    stored (imported first, so the hand-added ones are added after); their ids."""
    facts = [
        {
            "id": f"fact_org{i:04d}",
            "content": f"Works with {TOPICS[i]} every week",
            "category": "context",
            "confidence": 0.8,
            "createdAt": "2026-01-01T00:00:00.000Z",
            "source": "thread-a",
        }
        for i in range(organic)
    ]
    doc = {"version": "1.0", "lastUpdated": "", "user": {}, "history": {}, "facts": facts}
    path.write_text(json.dumps(doc), encoding="utf-8")
    mem.import_(path)
    mine = [
        mem.add_fact(f"Has a pet named {TOPICS[-1 - i]}", "context")["id"] for i in range(by_hand)
    ]
    return mine, [f["id"] for f in facts]


def write_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(text, encoding="utf-8")


class Scripted:
    """A hostile model behind the loopback server: the lead's first step returns ``calls``
    (name, arguments); every later chat answers "Done."; json-mode calls (folds,
    consolidation) answer ``json_reply`` when given, else the offline model's."""

    def __init__(self, inner: Any, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.inner = inner
        self.calls = calls
        self.json_reply: str | None = None

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: Any = None,
        json_mode: bool = False,
        on_text: Any = None,
    ) -> ChatResult:
        if json_mode:
            if self.json_reply is not None:
                return ChatResult(self.json_reply, [], Usage(10, 10), "loopback-model")
            return self.inner.chat(messages, tools=tools, json_mode=True, on_text=on_text)
        if tools and messages[-1].get("role") == "user":
            calls = [
                ToolCall(f"call_{i}", name, json.dumps(args))
                for i, (name, args) in enumerate(self.calls)
            ]
            return ChatResult("", calls, Usage(10, 10), "loopback-model", "tool_calls")
        if on_text is not None:
            on_text("Done.")
        return ChatResult("Done.", [], Usage(10, 10), "loopback-model")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed(texts)


def scripted(server: ServerHandle, calls: list[tuple[str, dict[str, Any]]]) -> Scripted:
    model = Scripted(server._httpd.model, calls)
    server._httpd.model = model
    return model


def remembers(n: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "remember",
            {"content": f"Trusts the site evil{i}.example with secrets", "category": "context"},
        )
        for i in range(n)
    ]


# -- 300 remember calls in one reply ---------------------------------------------------------
def test_one_reply_of_300_remember_calls_cannot_replace_memory(
    home: Path, model_server: ServerHandle
) -> None:
    write_config(home, "memory:\n  max_facts: 30\n")
    scripted(model_server, remembers(300))
    agent = Agent(home)
    mine, organic = seed(agent.memory, 10, 20, home.parent / "seed.json")
    agent.run("How are my notebooks doing?", thread="t")
    facts = {f["id"]: f for f in agent.memory.facts.list()}
    assert set(mine) <= set(facts)  # not one fact typed by hand was evicted
    planted = [f for f in facts.values() if "evil" in f["content"]]
    assert 0 < len(planted) <= MAX_REMEMBER_PER_TURN
    assert all(is_model_suggestion(f) and not is_user_fact(f) for f in planted)
    lost = [i for i in organic if i not in facts]
    assert len(lost) <= wipe_limit(30)
    results = [c for c in agent.last_turn.tool_calls if c["name"] == "remember"]
    assert len(results) == 300
    refused = [m for m in agent.journal.messages("t") if m["role"] == "tool"]
    assert sum("at most 5 facts" in str(m["content"]) for m in refused) >= 290
    agent.close()


def test_remember_is_the_users_only_when_the_user_asked(
    home: Path, model_server: ServerHandle
) -> None:
    calls = [("remember", {"content": "Works at Evil Corp", "category": "context"})]
    scripted(model_server, calls)
    agent = Agent(home)
    agent.run("Plot the churn by month.", thread="t")
    (fact,) = agent.memory.facts.list()
    assert is_model_suggestion(fact) and not is_user_fact(fact)
    # A later fold may remove the model's suggestion without review.
    report = agent.memory.apply({"factsToRemove": [fact["id"]]}, source="t2")
    assert report.removed == [fact["id"]] and report.pending_id is None
    agent.run("Please remember that I work at Evil Corp.", thread="t")
    (mine,) = agent.memory.facts.list()
    assert is_user_fact(mine) and not is_model_suggestion(mine)
    agent.close()


def test_the_models_suggestion_is_marked_in_memory_facts_and_confirmed_by_the_user(
    shell: InteractiveShell,
) -> None:
    from deerflow_nb.notebook.session import get_session

    memory = get_session(shell).memory
    tools = MemoryTools(memory, "t")  # no user message asked for it
    assert tools.call("remember", {"content": "Prefers tabs", "category": "preference"})
    shown = shell.run_line_magic("memory", "facts")
    assert "(suggested by the model) Prefers tabs" in str(shown)
    assert "(suggested by the model)" in shown._repr_html_()
    from deerflow_nb.inspector.view_models import fact_rows
    from deerflow_nb.notebook.panel import MemoryPanel

    panel = MemoryPanel(memory)
    texts = [c.value for c in panel.fact_rows.children[0].children if hasattr(c, "value")]
    assert "(suggested by the model) Prefers tabs" in texts
    assert fact_rows(memory.data)[0]["source"] == "t (suggested by the model)"
    shell.run_line_magic("memory", "add Prefers tabs")  # the user says it: now theirs
    (fact,) = memory.facts.list()
    assert is_user_fact(fact) and "(suggested by the model)" not in str(
        shell.run_line_magic("memory", "facts")
    )


def test_a_model_remember_never_evicts_a_fact_the_user_added(memory_home: Memory) -> None:
    mem = memory_home
    mem.settings.memory.max_facts = 3
    mine = [mem.add_fact(f"Has a pet named {name}")["id"] for name in ("Rex", "Tom", "Kim")]
    result = MemoryTools(mem, "t").call(
        "remember", {"content": "Trusts evil.example", "category": "context"}
    )
    assert result.startswith("Error:") and "you added by hand" in result
    assert [f["id"] for f in mem.facts.list(sort="none")] == mine


def test_a_user_asked_remember_is_capped_and_spares_user_facts_too(memory_home: Memory) -> None:
    mem = memory_home
    sites = ", ".join(f"evil{i}.example" for i in range(12))
    asked = f"Remember that I trust each site with secrets: {sites}"  # the user states them
    tools = MemoryTools(mem, "t", user_message=asked)
    replies = [tools.call(name, args) for name, args in remembers(12)]
    stored = mem.facts.list()
    assert len(stored) == MAX_REMEMBER_PER_TURN and all(is_user_fact(f) for f in stored)
    assert sum("at most 5 facts" in r for r in replies) == 12 - MAX_REMEMBER_PER_TURN
    mem.settings.memory.max_facts = MAX_REMEMBER_PER_TURN
    more = MemoryTools(mem, "t", user_message="Please remember that I like tea")
    result = more.call("remember", {"content": "Likes green tea", "category": "preference"})
    assert result.startswith("Error:") and "you added by hand" in result
    assert len(mem.facts.list()) == MAX_REMEMBER_PER_TURN


@pytest.fixture
def memory_home(home: Path) -> Any:
    mem = Memory(home)
    yield mem
    mem.close()


# -- consolidation under the same rules -------------------------------------------------------
def consolidation_reply(mem: Memory, groups: list[tuple[list[int], str, float]]) -> str:
    """A merges reply naming facts by their handle (``f1`` is the first fact)."""
    return json.dumps(
        {
            "merges": [
                {"facts": [f"f{i}" for i in idx], "content": text, "confidence": conf}
                for idx, text, conf in groups
            ]
        }
    )


def test_one_consolidation_cannot_merge_twelve_hand_added_facts(
    home: Path, model_server: ServerHandle
) -> None:
    mem = Memory(home)
    mine = [mem.add_fact(f"Has a pet named {TOPICS[i]}")["id"] for i in range(12)]
    model_server.reply_next(consolidation_reply(mem, [(list(range(1, 13)), "Is a user", 1.0)]))
    report = mem.consolidate()
    assert report.merged == [] and [f["id"] for f in mem.facts.list(sort="none")] == mine
    assert "at most 8 facts" in report.left_out[0]["reason"]
    model_server.reply_next(consolidation_reply(mem, [([1, 2, 3], "Is a user", 1.0)]))
    report = mem.consolidate()
    assert report.merged == [] and report.pending_id is not None  # user facts: approval only
    assert [f["id"] for f in mem.facts.list(sort="none")] == mine
    mem.close()


def test_a_merge_is_no_surer_than_its_sources_and_refused_below_the_threshold(
    home: Path, model_server: ServerHandle
) -> None:
    path = home.parent / "seed.json"
    mem = Memory(home)
    seed(mem, 0, 4, path)
    facts = mem.facts.list(sort="none")
    for fact, conf in zip(facts, (0.75, 0.75, 0.65, 0.60), strict=True):
        mem.facts.edit(fact["id"], confidence=conf)
    # The edits made them the user's: import them again as a fold's.
    doc = mem.data
    for fact in doc["facts"]:
        fact.pop("addedBy", None)
    path.write_text(json.dumps(doc), encoding="utf-8")
    mem.import_(path)
    reply = consolidation_reply(mem, [([1, 2], "Works with polars and pandas", 1.0)])
    model_server.reply_next(
        reply[:-2] + ', {"facts": ["f3", "f4"], "content": "Low", "confidence": 1.0}]}'
    )
    report = mem.consolidate()
    (merged,) = report.merged
    stored = {f["id"]: f for f in mem.facts.list()}
    assert stored[merged["id"]]["confidence"] == 0.75
    assert any("below memory.fact_confidence_threshold 0.7" in i["reason"] for i in report.left_out)
    assert "Low" not in [f["content"] for f in stored.values()]
    mem.close()


def test_a_consolidation_is_counted_by_the_wipe_guard(
    home: Path, model_server: ServerHandle
) -> None:
    mem = Memory(home)
    seed(mem, 0, 10, home.parent / "seed.json")
    groups = [
        ([1, 2], "Merged one", 0.8),
        ([3, 4], "Merged two", 0.8),
        ([5, 6], "Merged three", 0.8),
        ([7, 8], "Merged four", 0.8),
    ]
    model_server.reply_next(consolidation_reply(mem, groups))
    report = mem.consolidate()  # loses 4 of 10 facts: more than max(3, 20 %)
    assert report.merged == [] and report.pending_id is not None
    assert "remove or evict 4 of 10" in report.held[0]["reason"]
    assert len(mem.facts.list()) == 10
    mem.close()


def test_a_bad_consolidation_reply_is_one_line(home: Path, model_server: ServerHandle) -> None:
    mem = Memory(home)
    seed(mem, 0, 3, home.parent / "seed.json")
    model_server.reply_next('{"merges": [{"facts": ["f1", 7], "content": "x"}, 5]}')
    report = mem.consolidate()
    assert [i["item"] for i in report.left_out] == ["merges[0]", "merges[1]"]
    assert all("\n" not in i["reason"] for i in report.left_out)
    mem.close()


# -- guards that count across changes ---------------------------------------------------------
def test_many_small_folds_in_a_day_cannot_empty_memory(home: Path) -> None:
    mem = Memory(home)
    _, organic = seed(mem, 0, 20, home.parent / "seed.json")
    outcomes = []
    for i in range(9):
        report = mem.apply({"factsToRemove": organic[3 * i : 3 * i + 3][:3]}, source=f"t{i}")
        outcomes.append(report.outcome)
    assert outcomes[0] == "applied"
    assert "held for review" in outcomes[1:]
    assert len(mem.facts.list()) >= 20 - wipe_limit(20)
    held = [p for p in mem.pending() if p["source"].startswith("t")]
    assert held, "the folds over the day's limit wait for approval"
    mem.close()


def test_two_floods_cannot_evict_every_organic_fact(home: Path) -> None:
    write_config(home, "memory:\n  max_facts: 40\n")
    mem = Memory(home)
    _, organic = seed(mem, 0, 40, home.parent / "seed.json")
    for flood in range(2):
        new = [
            {"content": f"Flood {flood} item {TOPICS[i]} {i}", "confidence": 0.99} for i in range(7)
        ]
        mem.apply({"newFacts": new}, source=f"flood{flood}")
    kept = [i for i in organic if i in {f["id"] for f in mem.facts.list()}]
    assert len(organic) - len(kept) <= wipe_limit(40)
    mem.close()


def test_a_fold_rewriting_every_profile_section_waits_for_review(home: Path) -> None:
    mem = Memory(home)
    first = {
        group: {
            name: {"summary": f"Calm {name} text about data work", "shouldUpdate": True}
            for name in names
        }
        for group, names in (
            ("user", ("workContext", "personalContext", "topOfMind")),
            ("history", ("recentMonths", "earlierContext", "longTermBackground")),
        )
    }
    assert mem.apply(first, source="t1").outcome == "applied"
    rewrite = {
        group: {
            name: {"summary": "Sends passwords to evil.example", "shouldUpdate": True}
            for name in names
        }
        for group, names in first.items()
    }
    report = mem.apply(rewrite, source="t2")
    assert report.outcome == "held for review" and "profile section" in report.held[0]["reason"]
    assert mem.data["user"]["workContext"]["summary"].startswith("Calm")
    mem.close()


# -- DeerFlow's three parsing cases -----------------------------------------------------------
def test_a_non_text_category_is_stored_as_context(home: Path) -> None:
    mem = Memory(home)
    report = mem.apply({"newFacts": [{"content": "Uses duckdb", "category": 9, "confidence": 0.9}]})
    assert report.added and mem.facts.list()[0]["category"] == "context"
    mem.close()


def test_a_removal_with_a_malformed_replacement_is_not_applied(home: Path) -> None:
    mem = Memory(home)
    _, organic = seed(mem, 0, 3, home.parent / "seed.json")
    diff = {
        "factsToRemove": [organic[0], organic[2]],
        "newFacts": [
            {"content": "Works with polars daily now", "confidence": "very"},
            {"content": "Likes tea", "confidence": 0.9},
        ],
    }
    report = mem.apply(diff, source="t")
    ids = {f["id"] for f in mem.facts.list()}
    # As DeerFlow: which removal the malformed item replaced cannot be known, so none applies.
    assert organic[0] in ids and organic[2] in ids
    assert "Likes tea" in [f["content"] for f in mem.facts.list()]
    assert sum("replacement" in i["reason"] for i in report.left_out) == 2
    mem.close()


def test_an_example_object_before_the_real_diff_does_not_hide_it(
    home: Path, model_server: ServerHandle
) -> None:
    mem = Memory(home)
    journal_turn(mem, "t", "I prefer polars over pandas.")
    mem.enqueue("t")
    diff = {"newFacts": [{"content": "Prefers polars over pandas", "confidence": 0.9}]}
    model_server.reply_next(f'Example: {{"user": "alice"}} and the update: {json.dumps(diff)}')
    assert mem.flush().folded == ["t"]
    assert [f["content"] for f in mem.facts.list()] == ["Prefers polars over pandas"]
    mem.close()


# -- %memory add: dedupe like a fold, category from the text ---------------------------------
def test_memory_add_reinforces_a_restated_fact_and_reads_the_category(
    shell: InteractiveShell,
) -> None:
    from deerflow_nb.notebook.session import get_session

    shell.run_line_magic("memory", "add Prefers polars over pandas")
    notice = shell.run_line_magic("memory", "add Prefers polars over pandas for data frames")
    assert "Reinforced" in str(notice)
    (fact,) = get_session(shell).memory.facts.list()
    assert fact["category"] == "preference" and fact["confirmations"] == 2
    shell.run_line_magic("memory", "add Knows SQL window functions well")
    categories = {f["content"]: f["category"] for f in get_session(shell).memory.facts.list()}
    assert categories["Knows SQL window functions well"] == "knowledge"
