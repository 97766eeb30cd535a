"""Projects are walls (issue 36): a thread belongs to one project, recall and the model's
tools stay in it, names are normalised once, and a killed kernel keeps its streamed reply.

Through the public surface: real kernels (``InteractiveShell`` in subprocesses) and real
HTTP to the loopback server, whose captured requests show what reached the model.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from IPython.core.interactiveshell import InteractiveShell

from deerflow_nb import Agent, Memory
from deerflow_nb.agent.memory_tools import MemoryTools
from deerflow_nb.agent.tools import MEMORY_TOOLS, tool_specs
from deerflow_nb.notebook.session import get_session
from deerflow_nb.projects import MAX_NAME, project_name, thread_name
from deerflow_nb.storage.journal import Journal

if TYPE_CHECKING:
    from loopback import ServerHandle

ROOT = Path(__file__).resolve().parents[1]
ALPHA_SECRET = "The secret target column is zebra_code, our client is Acme Hospital."
ALPHA_WORDS = ("zebra_code", "Acme Hospital")
# What alpha's messages and fact hold beyond the words a query repeats back.
ALPHA_TEXTS = ("secret target", "zebra_code it is", "column is the target", "Acme Hospital.")
BETA_ASK = "Which wine regions are in the quality dataset?"


def said(requests: list[list[dict]], *words: str) -> bool:
    """Whether any message of any of ``requests`` holds one of ``words``."""
    return any(
        word in str(message.get("content") or "")
        for messages in requests
        for message in messages
        for word in words
    )


def thread_projects(home: Path) -> dict[str, str | None]:
    with sqlite3.connect(home / "journal.db") as conn:
        return dict(conn.execute("SELECT id, project FROM threads WHERE kind = 'lead'"))


# -- 1. a thread belongs to one project --------------------------------------------------
KERNEL = textwrap.dedent(
    """
    import sys
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "deerflow_nb")
    shell.run_line_magic("memory", "project " + sys.argv[1])
    shell.run_cell_magic("agent", "", sys.argv[2])
    from deerflow_nb.notebook.session import get_session
    print("THREAD:", get_session(shell).agent().last_turn.thread)
    """
)


def run_kernel(home: Path, script: Path, project: str, cell: str) -> str:
    """One fresh kernel on ``home`` in ``project`` running one plain ``%%agent`` cell."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DEERFLOW_NB_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, str(script), project, cell],
        env=env,
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split("THREAD:")[-1].strip()


def test_a_new_kernel_in_another_project_sends_nothing_of_the_first_projects_thread(
    home: Path, tmp_path: Path, model_server: ServerHandle
) -> None:
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL)
    alpha = run_kernel(home, script, "alpha", ALPHA_SECRET)
    beta = run_kernel(home, script, "beta", BETA_ASK)

    asked = [m for m in model_server.seen_messages if said([m], BETA_ASK)]
    assert asked, "beta's cell never reached the model"
    assert not said(asked[:1], *ALPHA_WORDS)  # beta's first request: nothing of alpha's
    assert not said(asked, *ALPHA_WORDS)
    assert alpha == "default" and beta != alpha
    assert thread_projects(home) == {alpha: "alpha", beta: "beta"}


def test_the_same_thread_name_is_two_threads_and_a_label_never_changes_by_use(
    home: Path, model_server: ServerHandle
) -> None:
    (home / "config.yaml").write_text("memory:\n  debounce_seconds: 600\n")
    first, second = Agent(), Agent()  # two kernels on one home
    first.run(ALPHA_SECRET, project="alpha")
    second.run(BETA_ASK, project="beta")
    first.run("And which rows are missing?", project="alpha")
    seen = model_server.seen_messages
    beta_requests = [m for m in seen if said([m], BETA_ASK) and not said([m], "rows are missing")]
    assert beta_requests and not said(beta_requests, *ALPHA_WORDS)
    alpha_again = [m for m in seen if said([m], "rows are missing")]
    assert said(alpha_again, "zebra_code") and not said(alpha_again, BETA_ASK)  # its own thread
    assert (first.last_turn.thread, second.last_turn.thread) == ("default", "default @beta")
    assert thread_projects(home) == {"default": "alpha", "default @beta": "beta"}
    # a re-run shows this project's last turn, never the other's
    assert second.journaled_turn("default", "beta").messages[0]["content"] == BETA_ASK
    assert second.fresh_thread("default", "beta") == "default-2"
    first.close()
    second.close()


def test_a_cell_in_another_project_uses_that_projects_thread_and_the_next_comes_back(
    shell: InteractiveShell, home: Path
) -> None:
    shell.run_line_magic("memory", "project churn")
    shell.run_cell_magic("agent", "", "Churn cell one.")
    shell.run_cell_magic("agent", "--project clinic", "Clinic cell.")
    clinic = get_session(shell).agent().last_turn.thread
    shell.run_cell_magic("agent", "", "Churn cell two.")
    turn = get_session(shell).agent().last_turn
    assert (turn.thread, turn.project, clinic) == ("default", "churn", "default @clinic")
    journal = get_session(shell).memory.journal
    users = [m["content"] for m in journal.messages("default") if m["role"] == "user"]
    assert users == ["Churn cell one.", "Churn cell two."]
    assert thread_projects(home) == {"default": "churn", "default @clinic": "clinic"}


def test_a_threads_project_is_the_first_recorded_and_an_old_one_keeps_its_own(
    home: Path,
) -> None:
    journal = Journal(home / "journal.db")
    journal.ensure_thread("old")  # from before projects: no label
    journal.ensure_thread("t", project="alpha")
    journal.begin_turn("t", {"role": "user", "content": "hi"}, model="m", project="beta")
    journal.ensure_thread("old", project="churn")  # filled once
    journal.ensure_thread("old", project="clinic")
    assert (journal.thread_project("t"), journal.thread_project("old")) == ("alpha", "churn")
    assert journal.thread_for("t", "alpha") == "t"
    assert journal.thread_for("t", "beta") == journal.thread_for("t", "beta") == "t @beta"
    journal.ensure_thread("t @beta", project="gamma")  # someone named a thread that way
    taken = journal.thread_for("t", "beta")
    assert taken.startswith("t @beta #") and journal.thread_for("t", "beta") == taken
    journal.ensure_thread("legacy")
    assert journal.thread_for("legacy", None) == journal.thread_for("legacy", "default")
    assert journal.thread_for("legacy", None) == "legacy"  # no label counts as default
    assert journal.thread_for("legacy", "beta") == "legacy @beta"
    journal.close()


def test_add_messages_journals_in_the_projects_thread_and_queues_its_fold(home: Path) -> None:
    mem = Memory(home)
    conversation = [
        {"role": "user", "content": "I prefer polars over pandas."},
        {"role": "assistant", "content": "Noted."},
    ]
    alpha = mem.add_messages("chat", conversation, project="alpha")
    beta = mem.add_messages("chat", [*conversation[:1], {"role": "assistant", "content": "Ok"}])
    assert (alpha, beta) == ("chat", "chat @default")
    assert [m["content"] for m in mem.journal.messages(alpha)] == [
        "I prefer polars over pandas.",
        "Noted.",
    ]
    assert {row["thread_id"] for row in mem.status()["pending"]} == {alpha, beta}
    mem.flush()
    assert "Prefers polars over pandas" in {f["content"] for f in mem.data["facts"]}
    with pytest.raises(ValueError, match="message 1"):
        mem.add_messages("chat", [{"role": "system", "content": "obey"}], project="alpha")
    assert len(mem.journal.messages(alpha)) == 2  # nothing of a refused call
    mem.close()


# -- 3. recall and the model's tools stay in their project ------------------------------
def test_recall_and_the_models_tools_in_one_project_find_nothing_of_another(home: Path) -> None:
    mem = Memory(home)
    mem.add_messages(
        "default",
        [
            {"role": "user", "content": ALPHA_SECRET},
            {"role": "assistant", "content": "zebra_code it is."},
        ],
        project="alpha",
    )
    mem.add_messages(
        "default",
        [
            {"role": "user", "content": "Beta looks at wine data."},
            {"role": "assistant", "content": "Wine it is."},
        ],
        project="beta",
    )
    mem.add_fact("The zebra_code column is the target", project="alpha")
    assert {h["thread"] for h in mem.recall("zebra_code client", project="alpha")} == {"default"}
    assert mem.recall("zebra_code client", project="beta") == []
    for thread in (None, "default"):
        nearest = mem.recall("zebra_code", thread=thread, project="beta", relevant_only=False)
        assert not said([nearest], *ALPHA_WORDS, "zebra_code")
    assert mem.recall("wine", thread="default", project="beta")  # beta's own "default"
    assert {h["thread"] for h in mem.recall("zebra_code", everywhere=True)} >= {"default"}

    specs = str(tool_specs(MEMORY_TOOLS))
    assert "all_projects" not in specs
    tools = MemoryTools(mem, "default @beta", project="beta")
    for call in (
        tools.search_memory("zebra_code", all_projects=True),
        tools.search_memory("", all_projects=True),
        tools.recall("zebra_code client", all_projects=True),
        tools.recall("zebra_code client", thread="default", all_projects=True),
        tools.call("recall", {"query": "Acme Hospital", "all_projects": True}),
    ):
        assert not any(text in call for text in ALPHA_TEXTS), call
    mem.close()


# -- 4. names normalised once -----------------------------------------------------------
HOSTILE = [
    "q" * 64 + "-alpha",
    "q" * 64 + "-beta",
    "../../etc\x00/passwd\n",
    "caf\u00e9",
    "cafe\u0301",  # the same name, decomposed
    "\u0430lpha",  # a Cyrillic a: another name, never alpha's
    "al\u200bpha",  # a zero-width space hides nothing
    "bidi\u202eevil",
    "lone\ud800surrogate",
    "tab\there\u3000wide",
]


def test_a_restatement_in_one_project_is_recalled_there_not_folded_into_anothers(
    home: Path,
) -> None:
    """A reply in beta restating what the user said in alpha is beta's to recall: it used to
    collapse into alpha's statement, which beta may not see, so beta found nothing."""
    with Memory(home) as mem:
        mem.settings.memory.enabled = False  # nothing folds behind the test's back
        said = "I prefer polars over pandas for dataframes."
        mem.add_messages("a1", [{"role": "user", "content": said}], project="alpha")
        mem.add_messages(
            "b1",
            [
                {"role": "user", "content": "Which dataframe library do I like?"},
                {
                    "role": "assistant",
                    "content": "(offline model) From memory: Prefers polars over pandas.",
                },
            ],
            project="beta",
        )
        in_beta = mem.recall("polars over pandas", project="beta")
        assert in_beta and {hit["project"] for hit in in_beta} == {"beta"}
        assert any("From memory: Prefers polars" in hit["content"] for hit in in_beta)
        in_alpha = mem.recall("polars over pandas", project="alpha")
        assert [hit["content"] for hit in in_alpha][:1] == [said]


def test_hostile_names_are_normalised_once_never_collide_and_never_raise() -> None:
    names = [project_name(text) for text in HOSTILE]
    for text, name in zip(HOSTILE, names, strict=True):
        assert project_name(name) == name and thread_name(thread_name(text)) == thread_name(text)
        assert len(name) <= MAX_NAME and unicodedata.is_normalized("NFC", name)
        assert not any(unicodedata.category(c)[0] == "C" for c in name), repr(name)
        assert "/" not in name and ".." not in name and name.strip() == name
        name.encode("utf-8")
        thread_name(text).encode("utf-8")
    assert names[0] != names[1]  # two long names never meet
    assert names[0].startswith("q" * 40) and names[1].startswith("q" * 40)
    assert names[2] == "etc-passwd"
    assert names[3] == names[4] == "café"
    assert names[5] != "alpha" and names[6] == "alpha"
    assert "/" not in thread_name("a/b\\c") and thread_name("default @beta") == "default @beta"
    assert thread_name("a\ud83d\ude00b") == "a\U0001f600b"  # a pair is its character
    with pytest.raises(ValueError):
        project_name("\x00/..")


def test_agent_run_records_normalised_names_and_surrogates_never_raise(home: Path) -> None:
    agent = Agent()
    agent.run("Hello there.", project="../../etc\x00/passwd\n")
    assert agent.last_turn.project == "etc-passwd"
    agent.run("Hello again.", thread="t\ud800x", project="p\udc00q")
    assert agent.last_turn.project == "p-q" and agent.last_turn.thread == "t\ufffdx"
    agent.run("And once more.", project="q" * 64 + "-beta")
    for wide in (True, False):  # recall by a hostile thread name, widened or not
        hits = agent.memory.recall(
            "hello again", thread="t\ud800x", project="p\udc00q", everywhere=wide
        )
        assert [h["content"] for h in hits][:1] == ["Hello again."]
    agent.close()
    labels = set(thread_projects(home).values())
    assert labels == {"etc-passwd", "p-q", project_name("q" * 64 + "-beta")}


# -- 5. a killed kernel keeps its partial streamed reply --------------------------------
STREAMING_KERNEL = textwrap.dedent(
    """
    from deerflow_nb import Agent
    Agent().run("I prefer polars over pandas. Tell me a long story.", project="alpha")
    """
)
STORY = " ".join(f"word{i:03d}" for i in range(120))  # about 120 chunks of 8 characters


def partial_reply(home: Path) -> str:
    try:
        with sqlite3.connect(home / "journal.db", timeout=5) as conn:
            rows = conn.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchall()
    except sqlite3.OperationalError:
        return ""
    return rows[-1][0] if rows else ""


def test_a_kernel_killed_mid_stream_leaves_the_words_it_showed_and_is_folded_on_load(
    home: Path, model_server: ServerHandle
) -> None:
    model_server.reply_next(STORY)
    model_server.slow_next(0.1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DEERFLOW_NB_HOME": str(home)}
    child = subprocess.Popen([sys.executable, "-c", STREAMING_KERNEL], env=env)
    deadline = time.monotonic() + 120
    while len(partial_reply(home)) < 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    child.wait()
    kept = partial_reply(home)
    assert len(kept) >= 200 and STORY.startswith(kept) and kept != STORY

    mem = Memory(home).start()  # as the next kernel loads it
    turns = mem.journal.turns("default")
    assert [t["status"] for t in turns] == ["interrupted"]
    assert [m["role"] for m in mem.journal.messages("default")] == ["user", "assistant"]
    mem.flush()
    assert "Prefers polars over pandas" in {f["content"] for f in mem.data["facts"]}
    mem.close()


def test_the_extraction_prompt_keeps_project_specifics_out_of_the_shared_sections() -> None:
    """Found by a review: the prompt asked for "key projects" in user.workContext, which
    every project injects, so one project's codenames reached another's turns."""
    from deerflow_nb.memory.folding.extraction import build_messages

    system = build_messages({"facts": []}, [{"role": "user", "content": "hi"}])[0][0]["content"]
    assert "shown in every project" in system and "never this project's" in system
    assert "key projects" not in system
