"""Memory wired to the injection layer and the embeddings cache (both real)."""

from __future__ import annotations

from pathlib import Path

from deerflow_nb import Memory
from deerflow_nb.memory import format_memory_for_injection, select_facts
from deerflow_nb.memory.retrieval.terms import texts_to_embed


def fold_turn(mem: Memory, thread: str, text: str) -> None:
    mem.journal.ensure_thread(thread)
    mem.journal.add_message(thread, {"role": "user", "content": text})
    mem.journal.add_message(thread, {"role": "assistant", "content": "Noted."})
    mem.enqueue(thread)
    assert mem.flush().folded == [thread]


def test_preview_and_selection_are_what_injection_produces(home: Path) -> None:
    mem = Memory(home)
    fold_turn(mem, "t1", "I prefer polars over pandas. I work on project Apollo.")
    preview = mem.preview("Which dataframe library should I use?")
    assert preview == format_memory_for_injection(
        mem.data, mem.settings.memory.max_injection_tokens, "Which dataframe library should I use?"
    )
    assert "<memory>" in preview and "Prefers polars over pandas" in preview
    chosen = mem.injection("dataframe polars", max_tokens=500)[1]
    assert chosen == select_facts(mem.data, "dataframe polars", 500)
    assert chosen[0]["content"] == "Prefers polars over pandas"
    hits = mem.search("polars", k=5)
    assert [fact["content"] for fact, _ in hits] == ["Prefers polars over pandas"]
    mem.close()


def test_fact_embeddings_are_computed_at_fold_time(home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  embeddings: openai:text-embedding-3-small\n")
    mem = Memory(home)
    fold_turn(mem, "t1", "I prefer polars over pandas. I work on project Apollo.")
    embedder = mem.embedder
    contents = [f["content"] for f in mem.data["facts"]]
    assert len(contents) == 2
    # Both facts and their words, at fold time.
    assert embedder is not None and embedder.computed == len(texts_to_embed(contents))
    mem.preview("fast dataframes")
    # The turn embeds only its query and the query's words.
    assert embedder.computed == len(texts_to_embed(contents)) + 3
    mem.close()
