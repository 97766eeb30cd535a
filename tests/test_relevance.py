"""The relevance floor: an off-topic search finds nothing and says so, an on-topic one still
finds its fact or message, through ``Memory``, the agent's tools and ``%memory``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from IPython.core.interactiveshell import InteractiveShell

from deerflow_nb import Memory
from deerflow_nb.agent.memory_tools import MemoryTools
from deerflow_nb.memory.retrieval import relevance
from deerflow_nb.notebook.session import get_session
from deerflow_nb.notebook.views.facts import SearchResults
from deerflow_nb.notebook.views.recall import RecallResults

FACTS = (
    "Uses 5-fold cross-validation for model selection",
    "Prefers polars over pandas for dataframes",
    "Writes Python for the nightly data pipelines",
    "Is learning TypeScript on weekends",
    "Lives in Beijing",
    "Deploys models as Docker containers on Kubernetes",
    "Tracks experiments in MLflow",
    "Reports PR-AUC because the classes are imbalanced",
    "Retrains the churn model every Monday",
    "Calibrates probabilities with isotonic regression",
    "Forecasts weekly sales with Prophet for the retail client",
    "Keeps processed tables as Parquet partitioned by date",
)
OFF_TOPIC = (
    "When did I last go camping with my kids?",
    "What is my sister's favourite flower?",
    "hiking boots",
)


@pytest.fixture
def memory(home: Path) -> Iterator[Memory]:
    mem = Memory(home)
    for text in FACTS:  # one day, store neighbours: what made filler look relevant
        mem.add_fact(text, "context", 0.9)
    yield mem
    mem.close()


def say(memory: Memory, thread: str, *messages: str) -> None:
    memory.journal.ensure_thread(thread)
    for i, text in enumerate(messages):
        role = "user" if i % 2 == 0 else "assistant"
        memory.journal.add_message(thread, {"role": role, "content": text})


def contents(results: list) -> list[str]:
    return [fact["content"] for fact, _ in results]


# -- fact search ------------------------------------------------------------------------
@pytest.mark.parametrize("query", OFF_TOPIC)
def test_an_off_topic_search_finds_no_fact(memory: Memory, query: str) -> None:
    assert memory.search(query) == []


def test_an_on_topic_search_still_finds_its_fact_and_only_facts_sharing_a_word(
    memory: Memory,
) -> None:
    assert contents(memory.search("cross-validation folds"))[0].startswith("Uses 5-fold")
    assert contents(memory.search("PYTHON")) == ["Writes Python for the nightly data pipelines"]
    assert contents(memory.search("which dataframe library do I prefer"))[0].startswith("Prefers")


def test_a_natural_question_finds_the_fact_without_the_kind_of_answer_it_names(
    shell: InteractiveShell,
) -> None:
    """ "which dataframe *library* do I like": the noun ending a which/what phrase names the
    kind of answer, which the fact stating it rarely holds; the other words find it."""
    memory = get_session(shell).memory
    memory.add_fact("Prefers polars over pandas for dataframes", "preference", 0.9)
    memory.add_fact("Uses 5-fold cross-validation for model selection", "behavior", 0.8)
    view = shell.run_line_magic("memory", "search which dataframe library do I like")
    assert isinstance(view, SearchResults)
    assert [f["content"] for f, _ in view.results] == ["Prefers polars over pandas for dataframes"]
    found = memory.search("What kind of cross-validation setup do I use?")
    assert contents(found)[0] == "Uses 5-fold cross-validation for model selection"
    # The kind of answer alone is still a word of the query: nothing holds "library".
    assert memory.search("which library do I like") == []


def test_the_nearest_miss_is_there_when_asked_for(memory: Memory) -> None:
    query = "tune ridge regression hyperparameters for the sales forecast quarterly"
    assert memory.search(query) == []
    (miss,) = memory.search(query, k=1, relevant_only=False)
    assert miss[0]["content"].startswith(("Calibrates", "Forecasts"))


# -- conversation recall ----------------------------------------------------------------
def test_recall_finds_nothing_off_topic_and_the_statement_on_topic(memory: Memory) -> None:
    say(
        memory,
        "ml",
        "Remember that I use 5-fold cross-validation for model selection.",
        "Noted.",
        "Our warehouse is Snowflake, queried through dbt models.",
        "Understood.",
    )
    for query in OFF_TOPIC:
        assert memory.recall(query) == [], query
    assert memory.recall("snowflake warehouse")[0]["seq"] == 3
    assert memory.recall("camping with my kids", relevant_only=False) == []  # no word at all


def test_a_short_query_is_not_found_on_one_of_its_two_words(memory: Memory) -> None:
    """A two-word query is covered by half when one of its words is stored in another
    sense ("race condition" against a charity race): a short query's best result must
    cover more of it (``SHORT_SEARCH_FLOOR``, ``SHORT_RECALL_FLOOR``), so it finds
    nothing, while both words still find what holds them."""
    memory.add_fact("Ran a charity race for mental health", "context", 0.9)
    say(memory, "weekend", "That charity race sounds great!", "It was fun.")
    for query in ("race condition", "What is a race condition?"):
        assert memory.search(query) == [], query
        assert memory.recall(query) == [], query
    assert contents(memory.search("charity race")) == ["Ran a charity race for mental health"]
    assert memory.recall("charity race")[0]["content"] == "That charity race sounds great!"
    assert relevance.coverage_floor(2, recall=True) > relevance.RECALL_FLOOR
    assert relevance.coverage_floor(3, recall=False) == relevance.SEARCH_FLOOR


def test_a_name_counts_as_covered_only_in_the_conversation_that_names_it(
    memory: Memory,
) -> None:
    """A conversation rarely repeats the name of whom it is with: a name the journal knows
    covers every message of the threads naming it, and nowhere else; an unknown name
    covers nothing."""
    say(memory, "with-caroline", "Hi Caroline, how was your week?", "I painted again.")
    say(memory, "chores", "I painted the garden fence.", "Looks good.")
    query = "When did {} paint the lake sunrise?"
    found = {(r["thread"], r["content"]) for r in memory.recall(query.format("Caroline"))}
    assert ("with-caroline", "I painted again.") in found
    assert memory.recall(query.format("Gina")) == []


def test_similarity_alone_finds_something_only_with_some_coverage_too() -> None:
    """In recall, a close cosine says a search found something only when its best message
    also covers ``recall_coverage`` of the query: a question sharing almost no word with
    anything stored (a personal question against a data-science notebook, cosine 0.53,
    coverage 0.19) is not found on similarity alone."""
    assert relevance.found(0.19, 0.34, 0.53, 0.36, similar_coverage=0.2) is False
    assert relevance.found(0.21, 0.34, 0.37, 0.36, similar_coverage=0.2) is True
    assert relevance.found(0.21, 0.34, 0.35, 0.36, similar_coverage=0.2) is False
    assert relevance.found(0.40, 0.34, None, None, similar_coverage=0.2) is True  # coverage
    assert relevance.found(0.19, 0.34, 0.53, 0.36) is True  # fact search asks no coverage


def test_minilm_floors_ask_recall_for_coverage_on_similarity_alone() -> None:
    """MiniLM's measured floors ask it (either runtime); an embedder never measured has only
    its near-identical cosine floor, and none without one."""
    floors = relevance.SIMILARITY_FLOORS["local:all-MiniLM-L6-v2"]
    onnx = SimpleNamespace(model_id="local:all-MiniLM-L6-v2@onnx")
    assert relevance.similar_coverage(onnx) == floors.recall_coverage > 0
    assert relevance.similar_coverage(SimpleNamespace(model_id="openai:text-embedding-3")) == 0
    assert relevance.similar_coverage(None) == 0.0


# -- the agent's tools ------------------------------------------------------------------
def test_search_memory_says_nothing_matches_and_offers_the_nearest_miss(memory: Memory) -> None:
    tools = MemoryTools(memory, "now")
    none = tools.call("search_memory", {"query": "camping with my kids"})
    assert none == f'Nothing stored matches "camping with my kids" ({len(FACTS)} facts searched).'
    query = "tune ridge regression hyperparameters for the sales forecast quarterly"
    miss = tools.call("search_memory", {"query": query}).splitlines()
    assert miss[0].endswith("Nearest miss, not a match:")
    assert len(miss) == 2 and ("Calibrates" in miss[1] or "Forecasts" in miss[1])
    found = tools.call("search_memory", {"query": "isotonic calibration"})
    assert found.startswith(f'1 of {len(FACTS)} remembered facts match "isotonic calibration"')


def test_recall_tool_says_nothing_matches(memory: Memory) -> None:
    say(memory, "ml", "Our warehouse is Snowflake, queried through dbt models.", "Understood.")
    tools = MemoryTools(memory, "now")
    assert tools.call("recall", {"query": "favourite hiking trail"}) == (
        'Nothing stored matches "favourite hiking trail" in earlier conversations.'
    )
    miss = tools.call("recall", {"query": "snowflake crystals winter holiday photos"})
    assert miss.splitlines()[0].endswith("Nearest miss, not a match:")
    assert "Snowflake" in miss.splitlines()[1]
    assert "Snowflake" in tools.call("recall", {"query": "which warehouse do we use"})


# -- %memory ----------------------------------------------------------------------------
def test_memory_search_and_recall_say_what_to_try(shell: InteractiveShell) -> None:
    memory = get_session(shell).memory
    for text in FACTS[2:]:  # nothing about dataframes
        memory.add_fact(text, "context", 0.9)
    view = shell.run_line_magic("memory", "search dataframe library")
    assert isinstance(view, SearchResults) and view.results == ()
    assert "Nothing stored matches 'dataframe library'" in str(view)
    assert "%memory facts" in str(view)
    query = "tune ridge regression hyperparameters for the sales forecast quarterly"
    missed = str(shell.run_line_magic("memory", f"search {query}"))
    assert "Nearest miss, not a match:" in missed
    say(memory, "ml", "Our warehouse is Snowflake, queried through dbt models.", "Understood.")
    recalled = shell.run_line_magic("memory", "recall camping trip")
    assert isinstance(recalled, RecallResults) and recalled.results == ()
    assert "Nothing said matches 'camping trip'. Try fewer or other words." in str(recalled)


# -- echoes -----------------------------------------------------------------------------
def test_echoes_collapse_into_the_users_statement(memory: Memory) -> None:
    say(
        memory,
        "monday",
        "Remember that I use 5-fold cross-validation for all model selection.",
        "Got it: you use 5-fold cross-validation whenever you select a model.",
        "Our warehouse is Snowflake, queried through dbt models.",
        "Understood.",
    )
    say(
        memory,
        "friday",
        "Which cross-validation setup do I use again?",
        "You use 5-fold cross-validation for model selection.",
    )
    results = memory.recall("cross-validation folds for model selection", k=3)
    first = results[0]
    assert (first["thread"], first["seq"], first["role"]) == ("monday", 1, "user")
    assert sorted((e["thread"], e["seq"]) for e in first["echoes"]) == [
        ("friday", 1),
        ("friday", 2),
        ("monday", 2),
    ]
    listed = {(r["thread"], r["seq"]) for r in results}
    assert not listed & {("friday", 1), ("friday", 2), ("monday", 2)}
    # An assistant message that only shares a word or two is no echo.
    assert "echoes" not in memory.recall("snowflake warehouse")[0]
    said = MemoryTools(memory, "now").call("recall", {"query": "cross-validation folds"})
    assert " | monday | #1 user: Remember that I use 5-fold" in said.splitlines()[1]
    assert said.splitlines()[1].endswith("(said back or asked about 3 more times)")


def test_the_offline_models_from_memory_replies_collapse_into_the_statement(home: Path) -> None:
    from deerflow_nb import Agent

    agent = Agent()
    agent.run("I prefer polars over pandas.", thread="told", project="p")
    agent.run("I use scikit-learn for modelling.", thread="told-2", project="p")
    agent.memory.flush()
    questions = [
        "Should I load this CSV with polars?",
        "Is polars faster than pandas here?",
        "polars or pandas for this join?",
        "Do I like pandas?",
        "Which dataframe library do I prefer, polars?",
    ]
    for i, question in enumerate(questions):
        answer = agent.run(question, thread=f"asked-{i}", project="p")
        assert "From memory: Prefers polars over pandas" in answer
    memory = agent.memory
    for query in ("polars", "pandas", "polars over pandas"):
        results = memory.recall(query)
        first = results[0]
        assert (first["thread"], first["role"]) == ("told", "user"), (query, results[:3])
        assert len(first["echoes"]) >= len(questions)  # every "From memory" reply
        assert not any(r["content"].startswith("(offline model) From memory") for r in results)
    said = MemoryTools(memory, "now", project="p").call("recall", {"query": "polars"})
    assert "#1 user: I prefer polars over pandas." in said.splitlines()[1]
    agent.close()


def test_the_question_an_echo_answers_collapses_too(memory: Memory) -> None:
    say(
        memory,
        "told",
        "My laptop runs Ubuntu 22.04 with 32 GB of RAM.",
        "Okay.",
        "Let's look at the Berlin dataset: 40 stores, sales in EUR, gaps in March.",
        "Noted: I would fill the March gaps per store before modelling.",  # its own words
    )
    say(
        memory,
        "asked",
        "What operating system is on my laptop?",  # shares one word with the statement
        "(offline model) From memory: Their laptop runs Ubuntu 22.04 with 32 GB of RAM.",
    )
    first = memory.recall("laptop operating system ram")[0]
    assert (first["thread"], first["seq"]) == ("told", 1)
    assert sorted((e["thread"], e["seq"]) for e in first["echoes"]) == [
        ("asked", 1),  # the question its answer restates the statement for
        ("asked", 2),
    ]
    listed = [(r["thread"], r["seq"]) for r in memory.recall("berlin march gaps")]
    assert ("told", 4) in listed  # a reply with words of its own is no echo
