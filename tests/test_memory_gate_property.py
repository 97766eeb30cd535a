"""The gate's promise as a property (issue 26): whatever a hostile model does in a day —
folds, ``remember`` calls, consolidations, staleness proposals, in any order — without a
person's approval no fact the user added is removed, and no more facts are lost than the
wipe guard allows: max(3, 20 %) of the facts memory held over the day (``wipe_limit`` of
the facts stored at the start plus every fact added since).

The model is real HTTP where it is a model call: consolidations are answered by the
loopback server (``reply_next``); folds are diffs applied as a fold applies them
(``Memory.apply``); ``remember`` goes through ``MemoryTools`` as the agent's calls do.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopback import ServerHandle, start_server

from deerflow_nb import Memory
from deerflow_nb.agent.memory_tools import MemoryTools
from deerflow_nb.memory.updates.updater import wipe_limit

USER_FACTS, ORGANIC_FACTS = 6, 14
WORDS = ("alpha", "bravo", "delta", "echo", "golf", "hotel", "india", "kilo", "lima", "oscar")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    with start_server(models=("loopback-model",)) as handle:
        yield handle


@pytest.fixture
def model_env(server: ServerHandle, monkeypatch: pytest.MonkeyPatch) -> ServerHandle:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("DEERFLOW_NB_MODEL", "loopback-model")
    return server


picks = st.lists(st.integers(0, 60), max_size=25)
new_facts = st.lists(
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS), st.integers(0, 999)), max_size=60
)
fold = st.tuples(st.just("fold"), picks, new_facts, st.booleans())
remember = st.tuples(st.just("remember"), st.integers(1, 12), st.integers(0, 999))
consolidate = st.tuples(
    st.just("consolidate"), st.lists(st.lists(st.integers(1, 40), max_size=12), max_size=4)
)
stale = st.tuples(st.just("stale"))
actions = st.lists(st.one_of(fold, remember, consolidate, stale), min_size=1, max_size=10)


def start(home: Path) -> tuple[Memory, set[str], int]:
    """A memory with hand-added and folded facts; the user's ids and the last event id."""
    mem = Memory(home)
    organic = [
        {
            "id": f"fact_o{i:03d}",
            "content": f"Works on the {WORDS[i % 10]} pipeline number {i}",
            "category": "context",
            "confidence": 0.8,
            "createdAt": "2020-01-01T00:00:00.000Z",  # stale long ago
            "source": "thread",
        }
        for i in range(ORGANIC_FACTS)
    ]
    doc = {"version": "1.0", "lastUpdated": "", "user": {}, "history": {}, "facts": organic}
    (home.parent / "seed.json").write_text(json.dumps(doc), encoding="utf-8")
    mem.import_(home.parent / "seed.json")
    mine = {mem.add_fact(f"Has a cat called {w} the {i}")["id"] for i, w in enumerate(WORDS[:6])}
    last = max((e["id"] for e in mem.events(limit=1)), default=0)
    return mem, mine, last


def act(mem: Memory, server: ServerHandle, action: tuple[Any, ...], turn: int) -> None:
    ids = [f["id"] for f in mem.facts.list(sort="none")]
    kind = action[0]
    if kind == "fold":
        _, removals, facts, sections = action
        diff: dict[str, Any] = {
            "factsToRemove": [ids[i % len(ids)] for i in removals] if ids else [],
            "newFacts": [
                {"content": f"Studies {a} and {b} topic {n}", "confidence": 0.99}
                for a, b, n in facts
            ],
        }
        if sections:
            diff["user"] = {
                name: {"summary": f"Rewritten by a hostile model {turn}", "shouldUpdate": True}
                for name in ("workContext", "personalContext", "topOfMind")
            }
        mem.apply(diff, source=f"fold{turn}")
    elif kind == "remember":
        _, count, seed = action
        tools = MemoryTools(mem, f"thread{turn}")  # the model chose to: no user message
        for i in range(count):
            tools.call("remember", {"content": f"Trusts site {seed}-{i}", "category": "context"})
    elif kind == "consolidate":
        merges = [
            {"facts": [f"f{h}" for h in group], "content": "Is a user", "confidence": 1.0}
            for group in action[1]
        ]
        if len(ids) >= 2:  # with fewer, consolidation asks no model
            server.reply_next(json.dumps({"merges": merges}))
            mem.consolidate()
    else:
        mem.propose_stale(days=1)


def lost_and_added(mem: Memory, after: int) -> tuple[int, int]:
    """Facts taken away and added by the events after ``after`` (a merge loses its sources
    but one)."""
    events = [e for e in mem.events(limit=100_000) if e["id"] > after]
    adds = sum(e["kind"] == "add" for e in events)
    merges = sum(e["kind"] == "add" and bool(e["details"].get("merged_from")) for e in events)
    gone = sum(e["kind"] in ("remove", "evict") for e in events)
    return gone - merges, adds


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=actions)
def test_no_hostile_day_removes_user_facts_or_more_than_the_guard_allows(
    model_env: ServerHandle, steps: list[tuple[Any, ...]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        mem, mine, last = start(home)
        try:
            for turn, step in enumerate(steps):
                act(mem, model_env, step, turn)
            stored = {f["id"] for f in mem.facts.list()}
            assert mine <= stored, "a fact the user added was removed without approval"
            lost, added = lost_and_added(mem, last)
            allowed = wipe_limit(USER_FACTS + ORGANIC_FACTS + added)
            assert lost <= allowed, f"{lost} facts lost in a day, the guard allows {allowed}"
        finally:
            mem.close()
