"""Conversation recall (``Memory.recall``, ``%memory recall``) over a real journal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from magic_lines import usage_error
from markdown_it import MarkdownIt

from deerflow_nb import Agent, Memory
from deerflow_nb.memory.retrieval import recall as recall_module
from deerflow_nb.memory.retrieval.embedder import Embedder
from deerflow_nb.memory.retrieval.recall_dense import scaled
from deerflow_nb.notebook.session import get_session
from deerflow_nb.notebook.views.recall import RecallResults

KEYS = {"thread", "seq", "role", "content", "created_at", "score", "project"}  # issue 28: + project


def say(memory: Memory, thread: str, *messages: str) -> None:
    """Journal alternating user / assistant messages on a lead thread."""
    memory.journal.ensure_thread(thread)
    for i, text in enumerate(messages):
        role = "user" if i % 2 == 0 else "assistant"
        memory.journal.add_message(thread, {"role": role, "content": text})


def contents(results: list[dict]) -> list[str]:
    return [r["content"] for r in results]


@pytest.fixture
def memory(home: Path) -> Memory:
    mem = Memory(home)
    yield mem
    mem.close()


def test_finds_a_message_by_its_words_and_by_its_neighbours(memory: Memory) -> None:
    say(
        memory,
        "trip",
        "Did you go camping at Lake Tahoe with the kids?",
        "Yes, last weekend! They loved it.",
        "Great. Now help me clean the churn dataframe.",
        "Sure: drop the duplicated customer ids first.",
    )
    say(memory, "other", "What is a good learning rate?", "Start with 3e-4 for Adam.")
    results = memory.recall("camping at Lake Tahoe", k=3)
    assert all(set(r) == KEYS for r in results)
    assert results[0]["content"] == "Did you go camping at Lake Tahoe with the kids?"
    assert results[0]["thread"] == "trip" and results[0]["seq"] == 1
    assert results[0]["role"] == "user" and results[0]["created_at"]
    # The reply shares no word with the query: its question carries it there.
    assert results[1]["content"] == "Yes, last weekend! They loved it."
    assert results[1]["score"] > 0
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    assert "Start with 3e-4 for Adam." not in contents(results)
    assert memory.recall("learning rate", thread="trip") == []
    assert contents(memory.recall("learning rate", thread="other"))[0].startswith("What is")


def test_the_named_person_and_the_named_date_come_first(memory: Memory) -> None:
    say(memory, "a", "Bob went hiking in the Alps.", "Nice.")
    say(memory, "b", "Alice went hiking in Norway.", "Lovely.")
    assert memory.recall("Where did Alice go hiking?")[0]["content"].startswith("Alice")
    say(memory, "c", "We tuned the model's features.", "Good.")
    say(memory, "d", "We tuned the model's features again.", "Better.")
    with memory.journal.transaction() as db:
        db.execute("UPDATE messages SET created_at = '2023-06-03T10:00:00.000Z'")
        db.execute(
            "UPDATE messages SET created_at = '2024-03-09T10:00:00.000Z' WHERE thread_id = 'd'"
        )
    # The index was built before the dates moved: a fresh one reads them.
    with memory.journal.transaction() as db:
        db.execute("DROP TABLE recall_docs")
    top = memory.recall("What features did we tune on 9 March, 2024?")[0]
    assert top["thread"] == "d"
    assert memory.recall("Which features did we tune in March?")[0]["thread"] == "d"
    assert memory.recall("Which features did we tune in June?")[0]["thread"] == "c"


def test_a_transcript_speaker_the_query_names_comes_before_one_naming_them(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Name: text`` messages: what Melanie said about camping, not what Caroline said to
    her about it, even with her name said three times."""
    say(memory, "a", "Caroline: Melanie, Melanie! Camping at the lake, Melanie?", "Tim: Hi.")
    say(memory, "b", "Melanie: Camping at the lake was lovely.", "Tim: Hi.")
    top = memory.recall("Where did Melanie go camping?", k=1)[0]
    assert top["content"] == "Melanie: Camping at the lake was lovely."
    monkeypatch.setattr(recall_module, "MENTION_GATE", 1.0)  # a mention as good as speaking
    top = memory.recall("Where did Melanie go camping?", k=1)[0]
    assert top["content"].startswith("Caroline: ")


def test_a_message_in_a_thread_about_the_query_comes_first(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two messages match alike; the one whose thread is about the query's topic wins."""
    say(
        memory,
        "trip",
        "We planned the lake camping trip for June.",
        "The campsite by the lake is booked.",
        "Which sleeping bag should I pack?",
        "A warm one: nights by the lake are cold.",
    )
    say(memory, "office", "Which sleeping bag should I pack?", "Any.", "Quarterly report due.")
    query = "Which sleeping bag should I pack for the lake camping trip?"  # no names
    found = [(r["thread"], r["content"]) for r in memory.recall(query)]
    assert found.index(("trip", "Which sleeping bag should I pack?")) < found.index(
        ("office", "Which sleeping bag should I pack?")
    )
    monkeypatch.setattr(recall_module, "THREAD_WEIGHT", 0.0)
    monkeypatch.setattr(recall_module, "NEIGHBOUR_WEIGHT", 0.0)
    found = [(r["thread"], r["content"]) for r in memory.recall(query)]
    assert found.index(("trip", "Which sleeping bag should I pack?")) > found.index(
        ("office", "Which sleeping bag should I pack?")
    )  # newer first among equals: the thread is what put "trip" ahead


def test_a_reply_gains_more_from_what_it_answers_than_from_what_follows(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    say(memory, "t", "Anything new?", "How was the Tahoe camping trip?", "Great, all of it.")
    scores = {r["content"]: r["score"] for r in memory.recall("Tahoe camping trip")}
    assert scores["Great, all of it."] > scores["Anything new?"]
    monkeypatch.setattr(recall_module, "BEFORE_SHARE", 1.0)
    monkeypatch.setattr(recall_module, "AFTER_SHARE", 1.0)
    scores = {r["content"]: r["score"] for r in memory.recall("Tahoe camping trip")}
    assert scores["Great, all of it."] == pytest.approx(scores["Anything new?"], abs=2e-3)


def test_leaves_out_tool_traffic_subagents_and_no_memory_turns(memory: Memory) -> None:
    journal = memory.journal
    journal.ensure_thread("lead")
    journal.add_message("lead", {"role": "user", "content": "Count the rows, please."})
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    journal.add_message("lead", {"role": "assistant", "content": "quokka", "tool_calls": [call]})
    journal.add_message("lead", {"role": "tool", "content": "quokka 42", "tool_call_id": "c1"})
    journal.add_message("lead", {"role": "assistant", "content": "There are 42 rows."})
    journal.ensure_thread("subagent-1", kind="subagent", parent_id="lead")
    journal.add_message("subagent-1", {"role": "user", "content": "wombat census"})
    journal.add_message("subagent-1", {"role": "assistant", "content": "wombat report"})
    turn = journal.start_turn("lead", "offline", private=True)
    journal.add_message("lead", {"role": "user", "content": "My pangolin secret"}, turn_id=turn)
    journal.end_turn(
        turn, status="ok", messages=[{"role": "assistant", "content": "pangolin noted"}]
    )
    assert memory.recall("quokka") == []
    assert memory.recall("wombat") == []
    assert memory.recall("pangolin") == []
    found = sorted(contents(memory.recall("rows")))
    assert found == ["Count the rows, please.", "There are 42 rows."]


def test_real_agent_turns_without_memory_and_subagents_stay_out(home: Path) -> None:
    agent = Agent(home, model="offline")
    agent.run("The axolotl survey is due Friday.", thread="work")
    agent.run("The capybara survey is private.", thread="work", use_memory=False)
    agent.run("Delegate to a sub-agent: summarise the narwhal notes.", thread="work")
    memory = agent.memory
    found = memory.recall("axolotl survey")
    assert found and found[0]["content"] == "The axolotl survey is due Friday."
    assert all("capybara" not in r["content"] for r in memory.recall("capybara survey"))
    subagents = [t["id"] for t in memory.journal.threads() if t["kind"] == "subagent"]
    assert subagents  # the sub-agent did run, in its own thread
    assert all(r["thread"] == "work" for r in memory.recall("narwhal notes"))
    memory.close()


def test_survives_a_new_memory_and_an_index_dropped_by_hand(home: Path) -> None:
    first = Memory(home)
    say(first, "t", "The flamingo dataset lives in S3.", "Noted.")
    assert contents(first.recall("flamingo"))[0] == "The flamingo dataset lives in S3."
    first.close()
    again = Memory(home)  # a kernel restart
    assert contents(again.recall("flamingo dataset"))[0] == "The flamingo dataset lives in S3."
    again.close()
    with sqlite3.connect(home / "journal.db") as conn:
        conn.execute("DROP TABLE recall_fts")
    after = Memory(home)
    say(after, "t", "And the heron dataset lives on disk.", "Noted too.")  # journaling works
    assert contents(after.recall("flamingo"))[0] == "The flamingo dataset lives in S3."
    assert contents(after.recall("heron"))[0] == "And the heron dataset lives on disk."
    assert len(after.recall("dataset")) == 4  # each message once
    after.close()


def test_dense_similarity_finds_a_paraphrase(memory: Memory) -> None:
    """With an embedder, a message sharing no word with the query is found by meaning."""
    topics = {"car": 0, "automobile": 0, "vehicle": 0, "soup": 1, "recipe": 1, "weather": 2}

    def compute(texts: list[str]) -> np.ndarray:
        out = np.full((len(texts), 4), 0.01, dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().replace("?", " ").replace(".", " ").split():
                if word in topics:
                    out[row, topics[word]] += 1
        return out

    say(memory, "t", "I sold my automobile.", "Sorry to hear.", "Tomato soup recipe?", "Sure.")
    assert "I sold my automobile." not in contents(memory.recall("car"))
    memory._vectors._embedder = Embedder("fake", compute, memory.journal)
    assert contents(memory.recall("car"))[0] == "I sold my automobile."


def test_cosines_count_from_the_mean_so_one_far_off_message_squeezes_nothing() -> None:
    """The dense score is 1 for the most similar message and 0 for any no closer than the
    average one; from the lowest cosine, the one far-off message would lift the rest."""
    cosines = {1: 0.8, 2: 0.5, 3: 0.2, 4: 0.1, 5: -0.6}  # mean 0.2
    assert scaled([1, 2, 3, 4, 5, 6], cosines) == pytest.approx([1.0, 0.5, 0.0, 0.0, 0.0, 0.0])
    assert scaled([4], cosines, zero="min") == pytest.approx([0.5])


# -- %memory recall ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("recall", "the following arguments are required: QUERY"),
        ("recall '  '", "query is empty"),
        ("recall churn -k 0", "must be a whole number of at least 1"),
        ("recall churn --thread nowhere", "no thread 'nowhere'"),
        ("recall churn --bogus", "unrecognized arguments: --bogus"),
    ],
)
def test_recall_errors_are_one_line(shell: InteractiveShell, line: str, expected: str) -> None:
    message = usage_error(shell, line)
    assert message.startswith("UsageError: ") and expected in message, message


def test_recall_magic_shows_a_table(shell: InteractiveShell) -> None:
    memory = get_session(shell).memory
    say(memory, "eda", "The churn table has 7043 rows.", "Yes, 7043 customers.")
    view = shell.run_line_magic("memory", "recall churn rows -k 1 --thread eda")
    assert isinstance(view, RecallResults) and len(view.results) == 1
    text = str(view)
    for header in ("thread", "date", "role", "excerpt", "score"):
        assert header in text
    assert "The churn table has 7043 rows." in text and "eda" in text


def test_a_recall_excerpt_shows_the_matching_words(shell: InteractiveShell) -> None:
    """Issue 37: a long message's row starts near the words that matched, in
    ``%memory recall`` and in the inspector, not at the message's start."""
    from deerflow_nb.inspector.view_models import recall_rows

    memory = get_session(shell).memory
    opening = "We spent the morning on plotting conventions and axis labels. " * 8
    say(memory, "eda", opening + "For the dataframes I prefer polars over pandas.", "Noted.")
    view = shell.run_line_magic("memory", "recall polars dataframes -k 1")
    (row,) = view.table().rows
    cell = row[view.headers.index("excerpt")]
    assert cell.startswith("…") and "prefer polars over pandas" in cell, cell
    assert len(cell) <= view.width
    (shown,) = recall_rows(list(view.results), "polars dataframes")
    assert "prefer polars over pandas" in shown["excerpt"] and shown["excerpt"][0] == "…"


def test_recall_results_text_is_inert(memory: Memory) -> None:
    hostile = (
        "<img src=x onerror=alert(1)> **bold** [click](javascript:alert(1)) | a | b "
        "<script>alert(2)</script>\x1b[31m"
    )
    say(memory, "<b>thread</b>", hostile, "ok")
    view = RecallResults("img", tuple(memory.recall("img onerror alert")), None)
    assert view.results and view.results[0]["content"] == hostile
    page = view._repr_html_()
    assert "<img" not in page and "<script" not in page and "<b>thread" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    # JupyterLab renders text/markdown with raw HTML on: render it the same way.
    rendered = MarkdownIt("commonmark").enable("table").render(view._repr_markdown_())
    assert "<img" not in rendered and "<script" not in rendered
    assert rendered.count("<strong>") == 1  # the title's; the message's **bold** stays text
    assert "href" not in rendered and "<b>" not in rendered
    assert rendered.count("<td>") == 6 * len(
        view.results
    )  # its pipes split no cell (6 with project)
    assert "\x1b" not in str(view) and "<img src=x" in str(view)
