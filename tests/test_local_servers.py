"""Local model servers (issue 31): a fold's output is capped in the parameter the server
takes, its reply is constrained to the diff's schema where the server can, what the server
refused is remembered in the home, and a fold gives the server to the user's turn.

All over real HTTP: the openai SDK against the loopback server (tests/loopback.py), which
can refuse a parameter as OpenAI's newer models refuse ``max_tokens``, and slow a stream.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from journal_rows import journal_turn
from loopback import ServerHandle, start_server

from deerflow_nb.config import ModelConfig, load_settings
from deerflow_nb.llm import server_sharing as servers
from deerflow_nb.llm.base import ModelError, output_cap
from deerflow_nb.llm.openai_client import OpenAIChatModel
from deerflow_nb.llm.server_sharing import GiveWay
from deerflow_nb.schema.diff import ExtractionDiff, diff_json_schema
from deerflow_nb.storage.journal import Journal
from deerflow_nb.storage.servers import traits


def make_model(base_url: str, home: Path | None = None, **config: Any) -> OpenAIChatModel:
    config.setdefault("timeout_seconds", 5.0)
    config.setdefault("max_retries", 0)
    return OpenAIChatModel("m", ModelConfig(base_url=base_url, **config), home=home)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def a_new_process() -> None:
    """Forget what this process learned of servers, as a kernel started later would."""
    servers._servers.clear()


@pytest.fixture
def server() -> Any:
    with start_server(models=("m",)) as handle:
        yield handle
    a_new_process()


def test_a_capped_call_sends_max_tokens_to_a_local_server(server: ServerHandle) -> None:
    model = make_model(server.base_url)
    model.bounded([user("hello")], max_output_tokens=64)
    (request,) = server.chat_requests
    assert request["max_tokens"] == 64 and "max_completion_tokens" not in request
    model.chat([user("hello")])  # a user's call sends no cap
    assert "max_tokens" not in server.chat_requests[-1]


def test_a_refused_cap_parameter_is_learned_once_and_remembered_in_the_home(
    server: ServerHandle, home: Path
) -> None:
    server.refuse("max_tokens")
    model = make_model(server.base_url, home)
    assert model.bounded([user("hello")], max_output_tokens=64).content
    first, second = server.chat_requests
    assert first["max_tokens"] == 64 and second["max_completion_tokens"] == 64
    journal = Journal(home / "journal.db")
    assert traits(journal.db, server.base_url)["cap_param"] == "max_completion_tokens"

    a_new_process()  # another kernel on the same home asks right the first time
    make_model(server.base_url, home).bounded([user("again")], max_output_tokens=64)
    assert "max_tokens" not in server.chat_requests[2]
    assert server.chat_requests[2]["max_completion_tokens"] == 64
    assert len(server.chat_requests) == 3


def test_a_server_refusing_both_cap_parameters_is_one_line() -> None:
    with start_server(models=("m",)) as server:
        server.refuse("max_tokens")
        server.refuse("max_completion_tokens")
        with pytest.raises(ModelError) as info:
            make_model(server.base_url).bounded([user("hello")], max_output_tokens=64)
        assert "\n" not in str(info.value) and "answered 400" in str(info.value)
        assert len(server.chat_requests) == 2
    a_new_process()


def test_the_diff_schema_goes_as_json_schema_else_json_mode_with_a_schema(
    server: ServerHandle, home: Path
) -> None:
    schema = diff_json_schema()
    model = make_model(server.base_url, home)
    model.bounded([user("I prefer polars.")], max_output_tokens=200, json_mode=True,
                  json_schema=schema)  # fmt: skip
    shape = server.chat_requests[-1]["response_format"]
    assert shape == {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}

    server.refuse("json_schema")  # llama-cpp-python's server: 422 on that type
    reply = model.bounded([user("I prefer polars.")], max_output_tokens=200, json_mode=True,
                          json_schema=schema)  # fmt: skip
    assert not ExtractionDiff.parse(json.loads(reply.content)).left_out  # a diff, in JSON mode
    assert server.chat_requests[-1]["response_format"] == {"type": "json_object", "schema": schema}
    a_new_process()
    make_model(server.base_url, home).bounded(
        [user("x")], max_output_tokens=200, json_mode=True, json_schema=schema
    )
    assert server.chat_requests[-1]["response_format"]["type"] == "json_object"


def test_the_window_lowers_the_cap() -> None:
    prompt = [user("word " * 300)]
    assert output_cap(1000, 128_000, prompt) == 1000
    assert output_cap(1000, 500, prompt) < 500 - 300
    assert output_cap(1000, 100, prompt) == 32  # never below a short answer


def test_a_fold_sends_its_cap_and_the_diff_schema(model_server: ServerHandle, home: Path) -> None:
    from deerflow_nb.memory import Memory

    (home / "config.yaml").write_text("model:\n  max_output_tokens: 300\n  max_retries: 0\n")
    memory = Memory(home)
    try:
        journal_turn(memory, "t", "I prefer polars over pandas.")
        memory.enqueue("t")
        report = memory.flush(timeout=60)
        assert report.folded == ["t"], report
        (fold,) = [r for r in model_server.chat_requests if "response_format" in r]
        assert fold["max_tokens"] == 300
        assert fold["response_format"]["json_schema"]["schema"] == diff_json_schema()
    finally:
        memory.close()


def test_a_summary_is_capped(model_server: ServerHandle) -> None:
    from deerflow_nb.agent.summarization import summarize, summary_cap
    from deerflow_nb.config import SummarizationConfig

    config = SummarizationConfig(trim_tokens_to_summarize=2000)
    model = make_model(model_server.base_url)
    model.name = "loopback-model"
    summarize(model, config, [user("I load sales.csv"), user("I plot revenue")], None)
    assert model_server.chat_requests[-1]["max_tokens"] == summary_cap(config) == 500


# -- the user's turn first -----------------------------------------------------------------


def test_a_fold_does_not_start_while_a_turn_holds_the_server(server: ServerHandle) -> None:
    model = make_model(server.base_url)
    with model.in_use(), pytest.raises(GiveWay):
        model.bounded([user("fold me")], max_output_tokens=64)
    assert server.chat_requests == []  # not even sent
    assert model.bounded([user("fold me")], max_output_tokens=64).content  # after: it runs


def test_a_turn_starting_mid_fold_makes_the_fold_give_way(server: ServerHandle) -> None:
    """The fold's stream stops at its next chunk once a turn starts; the turn is whole."""
    fold_model, turn_model = make_model(server.base_url), make_model(server.base_url)
    server.slow_next(0.2)  # the fold's reply: a chunk every 0.2 s
    outcome: list[BaseException] = []
    streaming = threading.Event()

    def fold() -> None:
        try:
            fold_model.chat([user("fold me")], max_output_tokens=64, background=True,
                            on_text=lambda _t: streaming.set())  # fmt: skip
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=fold)
    worker.start()
    assert streaming.wait(10)
    reply = turn_model.chat([user("Explain gradient boosting")], on_text=lambda _t: None)
    # The turn's request went out only once the fold had stopped: on a single-slot
    # server a fold request still arriving would queue the turn, or cut it off.
    assert outcome and turn_model.server.background_running == 0
    worker.join(10)
    assert not worker.is_alive()
    assert reply.finish_reason == "stop" and reply.content
    (error,) = outcome
    assert isinstance(error, GiveWay) and "gave way" in str(error)


def test_another_kernels_turn_is_seen_through_the_journal(
    server: ServerHandle, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease row in the journal, taken by a live process, holds folds off; its end frees
    the server, and a dead kernel's lease never counts."""
    from deerflow_nb.storage import servers as lease_rows

    journal = Journal(home / "journal.db")
    with journal.transaction() as db:
        lease_rows.take_lease(db, "lease-other", server.base_url)
    model = make_model(server.base_url, home)
    with pytest.raises(GiveWay):
        model.bounded([user("fold me")], max_output_tokens=64)
    with journal.transaction() as db:
        lease_rows.drop_lease(db, "lease-other")
    assert model.bounded([user("fold me")], max_output_tokens=64).content

    monkeypatch.setattr(lease_rows, "this_owner", lambda: f"{socket.gethostname()}:{2**30}")
    with journal.transaction() as db:  # a process id no process has
        lease_rows.take_lease(db, "lease-dead", server.base_url)
    assert model.bounded([user("fold me")], max_output_tokens=64).content


def test_a_fold_that_gives_way_stays_queued_and_status_says_so(
    model_server: ServerHandle, home: Path
) -> None:
    from deerflow_nb.llm import get_chat_model
    from deerflow_nb.memory import Memory

    (home / "config.yaml").write_text("model:\n  max_retries: 0\n")
    memory = Memory(home)
    try:
        journal_turn(memory, "t", "I prefer polars over pandas.")
        memory.enqueue("t")
        turn_model = get_chat_model(load_settings(home))
        with turn_model.in_use():
            report = memory.flush(timeout=30)
            status = memory.status()
        assert report.waiting == ["t"] and not report.failed and report.pending == 1
        (row,) = status["pending"]
        assert row["attempts"] == 0 and row["status"] == "pending"
        assert "gave way to your turn" in status["waiting_for_user"]
        assert not [r for r in model_server.chat_requests if "response_format" in r]
        report = memory.flush(timeout=30)  # the turn ended: the fold runs
        assert report.folded == ["t"] and memory.status()["waiting_for_user"] == "no"
    finally:
        memory.close()


def test_a_busy_server_is_told_apart_from_a_down_one(server: ServerHandle) -> None:
    """It took the connection but did not answer in time: busy, not "cannot reach"."""
    model = make_model(server.base_url, timeout_seconds=0.5)
    hold = server.hold_next()
    with pytest.raises(ModelError) as info:
        model.chat([user("hello")])
    hold.release.set()
    assert "up but busy" in str(info.value) and "cannot reach" not in str(info.value)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ModelError, match="cannot reach"):
        make_model(f"http://127.0.0.1:{port}/v1").chat([user("hello")])


def test_the_diff_schema_lets_a_fold_remove_only_the_facts_it_was_shown() -> None:
    """A small model invents handles to remove (every SmolLM2 reply did, left out one by
    one); constrained, it can name only the prompt's, and every confidence passes the gate."""
    assert diff_json_schema()["properties"]["factsToRemove"]["maxItems"] == 0
    listed = diff_json_schema(["f1", "f2"])["properties"]["factsToRemove"]
    assert listed["items"]["enum"] == ["f1", "f2"] and listed["maxItems"] == 2
    fact = diff_json_schema()["properties"]["newFacts"]["items"]["properties"]
    for confidence in fact["confidence"]["enum"]:
        raw = {"newFacts": [{"content": "Prefers polars", "category": "preference",
                             "confidence": confidence}]}  # fmt: skip
        assert not ExtractionDiff.parse(raw).left_out
