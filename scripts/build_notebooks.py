"""Write the example notebooks in ``example_notebooks/`` from the cells listed here.

The notebooks are committed without outputs (so they never rot in git) and are executed
by ``tests/test_notebooks.py`` in a real kernel. Editing them here keeps the four of them
consistent (the same setup cell, the same journal helper) and reviewable as plain text:

    .venv/bin/python scripts/build_notebooks.py          # rewrite the .ipynb files
    .venv/bin/python scripts/build_notebooks.py --check  # fail if they are out of date

Cells that the tests look at carry a tag (``cell.metadata.tags``), so a reworded
Markdown cell never breaks a test.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "example_notebooks"


def md(text: str) -> tuple[str, str, list[str]]:
    return ("markdown", textwrap.dedent(text).strip("\n"), [])


def code(text: str, *tags: str) -> tuple[str, str, list[str]]:
    return ("code", textwrap.dedent(text).strip("\n"), list(tags))


def home_cell(prefix: str, extra: str = "") -> tuple[str, str, list[str]]:
    """The first code cell of every notebook: pick the home folder, never hard-code it."""
    body = f'''
    import os
    import tempfile
    from pathlib import Path

    # `make demo` and the tests set DEERFLOW_NB_HOME (the kernel inherits it). Opened by
    # hand, the notebook uses a fresh temporary folder, so it never touches the personal
    # memory in ~/.deerflow_nb. Set DEERFLOW_NB_HOME before starting Jupyter to choose.
    os.environ.setdefault("DEERFLOW_NB_HOME", tempfile.mkdtemp(prefix="{prefix}"))
    HOME = Path(os.environ["DEERFLOW_NB_HOME"])
    HOME.mkdir(parents=True, exist_ok=True)
    '''
    body = textwrap.dedent(body).strip("\n")
    if extra:
        body += "\n" + textwrap.dedent(extra).strip("\n")
    body += '\nprint("home:", HOME)'
    return ("code", body, ["setup"])


SQL_HELPER = code(
    '''
    import sqlite3
    from contextlib import closing

    import pandas as pd

    pd.set_option("display.max_colwidth", 90)


    def sql(query, *params):
        """Run one read-only query against the journal and return a DataFrame."""
        with closing(sqlite3.connect(HOME / "journal.db")) as con:
            return pd.read_sql_query(query, con, params=params)
    '''
)


# --------------------------------------------------------------------------- quickstart
QUICKSTART = [
    md(
        """
        # deerflow_nb quickstart: an agent that remembers you

        This notebook is what `make demo` runs. In five minutes it shows the whole idea:

        1. you chat with an agent in a notebook cell (`%%agent`),
        2. it quietly turns what you said about *yourself* into **memory facts**,
        3. a brand-new conversation, days later, already knows them.

        Everything here runs on the **built-in offline model**: deterministic, no API key,
        no network. Its replies start with `(offline model)` so nobody mistakes it for a
        real LLM. It does understand plain first-person statements ("I prefer…", "I work
        on…", "I use…"), which is exactly what long-term memory is about. Point the same
        notebook at a real model with `OPENAI_API_KEY` (see `real_models.ipynb`).
        """
    ),
    md(
        """
        ## 1. Choose where memory lives

        All state (the memory file `memory.json`, the journal `journal.db`, an optional
        `config.yaml`) lives in one **home folder**: `$DEERFLOW_NB_HOME`, by default
        `~/.deerflow_nb`. For a demo we want a throw-away home, so your real memory stays
        untouched.
        """
    ),
    home_cell("deerflow_nb_quickstart_"),
    md(
        """
        ## 2. Load the extension

        `%load_ext deerflow_nb` registers two magics: the cell magic `%%agent` (talk to
        the agent) and the line magic `%memory` (look at and edit what it remembers).
        """
    ),
    code(
        """
        %load_ext deerflow_nb
        """
    ),
    md(
        """
        ## 3. Talk to the agent

        Each `%%agent` cell is one turn of a conversation **thread** (the default thread is
        called `default`; `-t NAME` picks another). The cell body is your message. Here we
        mention our work and our tools, the way you naturally would.
        """
    ),
    code(
        """
        %%agent
        Hi! I work on a churn model for a telecom company.
        """,
        "turn",
    ),
    code(
        """
        %%agent
        I prefer polars over pandas for dataframes. I use scikit-learn for modelling.
        """,
        "turn",
    ),
    md(
        """
        ## 4. Fold the conversation into memory

        After each turn the conversation is written to the journal and queued for memory
        extraction. In normal use a background worker waits for a quiet moment (the
        *debounce*, 30 s by default, as in DeerFlow) so a burst of turns is folded once.
        For a demo we don't want to wait: `%memory flush` folds every pending thread now.

        Folding means: a memory model reads the new messages next to the facts already
        stored and answers with a *diff* (new facts, facts to remove, updated summaries);
        the updater applies it with a confidence threshold and de-duplication.
        """
    ),
    code(
        """
        %memory flush
        """,
        "flush",
    ),
    md(
        """
        ## 5. What does it know now?

        `%memory` with no arguments opens the **memory panel** (an ipywidgets view with
        tabs for the profile, facts, preview, pending changes and history; forget, edit
        and add with a click). In a static render of this notebook you will only see
        its placeholder, so below it `%memory facts` prints the same facts as a table.

        The facts are phrased in the third person ("Prefers polars over pandas") because
        they describe *you* to a future conversation; each has a category, a confidence
        and the thread it came from.
        """
    ),
    code(
        """
        %memory
        """,
        "panel",
    ),
    code(
        """
        %memory facts
        """,
        "memory",
    ),
    md(
        """
        ## 6. A fresh thread that already knows you

        `-t fresh` starts a brand-new conversation: none of the messages above are in it.
        The only bridge is memory: before the model is called, the relevant facts are
        injected into its system prompt inside a `<memory>` block (within a token
        budget). The offline model quotes the remembered facts that share words with
        your question, so you can see that they arrived.
        """
    ),
    code(
        """
        %%agent -t fresh
        Which dataframe library do I prefer for my churn model?
        """,
        "fresh-answer",
    ),
    md(
        """
        For contrast, the same question with `--no-memory`: nothing is injected, so the
        agent has no idea.
        """
    ),
    code(
        """
        %%agent -t fresh-no-memory --no-memory
        Which dataframe library do I prefer for my churn model?
        """,
        "no-memory-answer",
    ),
    md(
        """
        ## 7. Exactly what the model sees

        `%memory preview` prints the block that the next turn injects, byte for byte.
        There is no hidden state: this text, plus your thread, is the whole prompt.
        """
    ),
    code(
        """
        %memory preview
        """,
        "preview",
    ),
    md(
        """
        ## 8. Where it all lives

        `memory.json` uses DeerFlow's schema field for field, so it can be read, diffed
        and even moved to DeerFlow. `journal.db` is a plain SQLite file with every
        message, turn and memory change. `%memory status` shows the paths and the queue.
        To browse everything in a browser: `deerflow-nb inspect --home <home>`.
        """
    ),
    code(
        """
        %memory status
        """,
        "status",
    ),
    code(
        """
        import json

        memory = json.loads((HOME / "memory.json").read_text())
        for fact in memory["facts"]:
            print(f"{fact['category']:<11} {fact['confidence']:.2f}  {fact['content']}")
        """,
        "memory-json",
    ),
    md(
        """
        ## Cheat sheet

        `%%agent` flags (on the first line of the cell):

        | flag | what it does |
        |---|---|
        | `-t NAME` | talk in thread NAME (later cells without `-t` continue it) |
        | `--new` | start a fresh thread |
        | `-m ID` | use another model for this cell (`-m offline`: the built-in one) |
        | `--no-memory` | no memory injected in this turn |
        | `--no-subagents` | no `task` tool in this turn |
        | `-o VAR` | also store the reply in variable VAR (it is always in `_agent`) |
        | `-i` | interpolate `{name}` with notebook variables in the message |
        | `--allow-code` | let the agent run code in your kernel (off by default) |

        `%memory` subcommands: `facts`, `search`, `preview`, `add`, `edit`, `forget`,
        `flush`, `status`, `history`, `versions`, `diff`, `rollback`, `review`,
        `pending`, `approve`, `reject`, `export`, `import`, `reset`; `%memory --help` and
        `%memory SUBCOMMAND --help` explain each.

        ## Where next

        - `memory_tour.ipynb`: the memory loop step by step (journal, queue, diff,
          preview, forget, history, review mode, rollback).
        - `subagents_and_summarization.ipynb`: notebook tools, sub-agents, long threads.
        - `real_models.ipynb`: OpenAI, Azure, Ollama or any OpenAI-compatible server.
        """
    ),
]


# --------------------------------------------------------------------------- memory tour
MEMORY_TOUR = [
    md(
        """
        # A tour of the memory loop

        The quickstart showed *that* the agent remembers. This notebook shows *how*, one
        step at a time, with the real files on disk:

        `%%agent` turn → **journal** (SQLite) → **queue** → extraction **diff** →
        **memory.json** → **injection** into the next turn; plus the controls a careful
        user wants: preview, forget, history, review mode and rollback.

        It runs on the built-in offline model (no key). Its extractor picks up explicit
        first-person statements, so every fact below can be traced to a sentence you
        can read.
        """
    ),
    md(
        """
        ## Setup

        Besides the home folder we write a `config.yaml` into it with a long debounce
        (`memory.debounce_seconds`), so that queued work waits for us to look at it
        instead of being folded by the background worker while we read. Settings are
        read when the extension loads, so the file is written first.
        """
    ),
    home_cell(
        "deerflow_nb_memory_tour_",
        """
        (HOME / "config.yaml").write_text("memory:\\n  debounce_seconds: 3600\\n")
        print((HOME / "config.yaml").read_text())
        """,
    ),
    code(
        """
        %load_ext deerflow_nb

        from deerflow_nb.session import get_session

        mem = get_session(get_ipython()).memory  # the same Memory object %memory uses
        """
    ),
    md(
        """
        We will read the journal directly with SQL. Any SQLite tool works (`sqlite3`,
        `sqlite-utils`, Datasette); here, a four-line helper that returns a DataFrame.
        """
    ),
    SQL_HELPER,
    md(
        """
        ## 1. A turn is journaled

        One `%%agent` cell is one *turn*. The user message, the assistant's reply (and any
        tool calls) are appended to the `messages` table, and the turn itself (model,
        token counts, how many facts were injected) to `turns`. The journal is the
        write-ahead log: once a turn is there, it is safe even if the kernel dies.
        """
    ),
    code(
        """
        %%agent -t tour
        I work on a churn model for a telecom. I use DuckDB for local analytics.
        I prefer short answers with code.
        """,
        "turn-1",
    ),
    code(
        """
        sql("SELECT id, kind, parent_id, model, created_at FROM threads")
        """,
        "threads",
    ),
    code(
        """
        sql("SELECT thread_id, seq, role, content, tokens FROM messages ORDER BY thread_id, seq")
        """,
        "messages",
    ),
    code(
        """
        sql(
            "SELECT thread_id, status, model, input_tokens, output_tokens, facts_injected "
            "FROM turns"
        )
        """,
        "turns",
    ),
    md(
        """
        ## 2. The queue

        After the turn, the thread is *enqueued* for memory extraction: one durable row
        per thread in `memory_queue`, holding a snapshot of the messages worth reading
        (user messages and final answers; tool chatter is filtered out). A second turn in
        the same thread replaces the row rather than adding one, and its due time is pushed
        back by the debounce. If the kernel is killed now, the row is still here and is
        folded the next time the extension loads.
        """
    ),
    code(
        """
        queue = sql(
            "SELECT *, strftime('%Y-%m-%dT%H:%M:%SZ', due_at, 'unixepoch') AS due "
            "FROM memory_queue"
        )
        queue.drop(columns=["snapshot", "due_at"])
        """,
        "queue",
    ),
    code(
        """
        import json

        for message in json.loads(queue.loc[0, "snapshot"]):
            print(f"{message['role']:>9}: {message['content']}")
        """,
        "snapshot",
    ),
    md(
        """
        ## 3. The extraction diff

        Folding asks the *memory model* for a diff in DeerFlow's classic shape: updated
        `user` / `history` summaries (each with `shouldUpdate`), `newFacts` (content,
        category, confidence) and `factsToRemove`. Below we call the offline memory
        model on the queued snapshot ourselves, just to *look* at the diff it returns;
        the real fold does the same and then applies it.
        """
    ),
    code(
        """
        from deerflow_nb.llm.offline import OfflineModel
        from deerflow_nb.memory.extraction import build_messages, parse_reply

        snapshot = json.loads(queue.loc[0, "snapshot"])
        prompt, handles = build_messages(mem.data, snapshot)
        print(prompt[1]["content"])  # what the memory model reads (the system prompt is longer)
        reply = OfflineModel().chat(prompt, json_mode=True)
        diff = parse_reply(reply.content, handles)
        print(json.dumps({k: diff[k] for k in ("newFacts", "factsToRemove")}, indent=2))
        """,
        "diff",
    ),
    md(
        """
        `%memory flush` folds the queue now: the diff is applied, facts under the
        confidence threshold (`memory.fact_confidence_threshold`, 0.7) are dropped, a
        near-duplicate reinforces the fact already stored instead of adding a second
        one, and the queue row goes away.
        """
    ),
    code(
        """
        %memory flush
        """,
        "flush-1",
    ),
    code(
        """
        sql("SELECT count(*) AS rows_left FROM memory_queue")
        """
    ),
    md(
        """
        ## 4. memory.json

        The result is a plain JSON file in DeerFlow's schema: `user` and `history`
        summaries plus a list of `facts`, each with an id, category, confidence,
        timestamps and `source` (the thread it came from). You may read it, diff it, put
        it in version control, or delete it to start over.
        """
    ),
    code(
        """
        print((HOME / "memory.json").read_text())
        """,
        "memory-json",
    ),
    md(
        """
        ## 5. What gets injected: `%memory preview`

        Before each turn the agent builds a `<memory>` block and puts it in the system
        prompt. `%memory preview` prints exactly that block, with its exact token count.
        It is limited to a token budget (`memory.max_injection_tokens`, 2000 by
        default), so facts are *ranked*: without a question, by confidence; with one, by
        relevance to the turn's message (BM25 over the fact texts, fused with embeddings
        if you configure them), with confidence and recency as tie-breakers.
        `--context "…"` shows the ranking a turn with that message would get, and
        `--tokens N` a smaller budget: the least relevant facts are the ones left out.
        """
    ),
    code(
        """
        %memory preview
        """,
        "preview",
    ),
    code(
        """
        %memory preview --context "which database should I use for analytics?"
        """,
        "preview-context",
    ),
    code(
        """
        %memory preview --context "which database should I use for analytics?" --tokens 70
        """,
        "preview-budget",
    ),
    md(
        """
        ## 6. Search, forget, and see the history

        `%memory search` ranks facts by relevance to a query (the same ranking the
        injection uses). A fact can be removed by id (`%memory forget ID`) or by text
        (`%memory forget --match TEXT`; with several matches it asks for `--yes`).
        Forgetting really deletes the fact from memory.json, and the event is journaled
        in `memory_events`, so `%memory history` can still tell you when it was added,
        when it was removed, and by whom.
        """
    ),
    code(
        """
        %memory search DuckDB analytics
        """,
        "search",
    ),
    code(
        """
        %memory forget --match DuckDB
        """,
        "forget",
    ),
    code(
        """
        %memory history
        """,
        "history",
    ),
    code(
        """
        sql(
            "SELECT id, kind, COALESCE(fact_id, section) AS fact_or_section, "
            "COALESCE(old_content, '') AS old_content, "
            "COALESCE(new_content, '') AS new_content, source FROM memory_events"
        )
        """,
        "events",
    ),
    md(
        """
        ## 7. Review mode: nothing lands without your approval

        With `%memory review on`, folds no longer change memory.json: each diff waits in
        `pending_changes` until you approve or reject it. Useful in a shared notebook,
        or while you are learning what the extractor picks up.

        One thing worth knowing about the forget above: unlike DeerFlow, a fold reads
        only the messages it has not folded before. The sentence "I use DuckDB" is still
        in thread `tour`, but the next fold will not learn it again. In the conversation
        itself, "Please forget that …" does the same as `%memory forget`.
        """
    ),
    code(
        """
        %memory review on
        """,
        "review-on",
    ),
    code(
        """
        %%agent -t tour
        Please forget that I use DuckDB. I prefer polars over pandas.
        I use LightGBM for the churn model.
        """,
        "turn-2",
    ),
    code(
        """
        %memory flush
        """,
        "flush-2",
    ),
    code(
        """
        %memory pending
        """,
        "pending",
    ),
    code(
        """
        %memory approve --all
        """,
        "approve",
    ),
    code(
        """
        %memory review off
        %memory facts
        """,
        "after-approve",
    ),
    md(
        """
        ## 8. Versions and rollback

        Every change to memory.json (fold, add, edit, forget, approve …) stores a
        snapshot in `memory_versions`. `%memory versions` lists them, `%memory diff A B`
        compares two, and `%memory rollback V` restores one (itself a new version, so a
        rollback can be undone). Here we undo the approval.
        """
    ),
    code(
        """
        %memory versions
        """,
        "versions",
    ),
    md(
        """
        We look the version number up in Python. `%memory` deliberately does not expand
        `$variables` (a fact may well contain "$5"), so to pass one we build the line
        ourselves and call `get_ipython().run_line_magic`.
        """
    ),
    code(
        """
        versions = mem.versions()
        approved = max(v["id"] for v in versions if v["reason"] == "approve")
        before_approve = max(v["id"] for v in versions if v["id"] < approved)
        print("the approval is version", approved, "- going back to", before_approve)

        get_ipython().run_line_magic("memory", f"diff {before_approve}")
        """,
        "diff-versions",
    ),
    code(
        """
        get_ipython().run_line_magic("memory", f"rollback {before_approve}")
        """,
        "rollback",
    ),
    code(
        """
        %memory facts
        """,
        "after-rollback",
    ),
    md(
        """
        The facts from the approval are gone again, and the forgotten DuckDB fact did
        not come back: a rollback restores one exact snapshot, not a merge of the past.
        """
    ),
    code(
        """
        final = json.loads((HOME / "memory.json").read_text())
        print([f["content"] for f in final["facts"]])
        """,
        "final",
    ),
]


# ------------------------------------------------------------ sub-agents and summarization
SUBAGENTS = [
    md(
        """
        # Notebook tools, sub-agents and long threads

        Three things a lead agent does besides chatting, each visible in the journal:

        1. **Notebook tools**: it can list and describe your variables, read cells, and
           (only if you allow it) run code.
        2. **Sub-agents**: a task with several independent parts is split with the `task`
           tool; each sub-agent works in its own isolated thread, and only its final
           answer comes back to the lead agent.
        3. **Summarization**: when a thread grows past a limit, older messages are
           replaced *in the prompt* by a summary (the journal keeps them all).

        All on the built-in offline model, no key needed.
        """
    ),
    md(
        """
        ## Setup: a config.yaml with a low summarization trigger

        DeerFlow's `summarization` settings say *when* to summarize (`trigger`: a list of
        message counts, token counts or fractions of the context window, any of which
        fires) and *how much to keep* verbatim (`keep`). The default fires at 80 % of the
        window, which a demo never reaches, so we lower it to 6 messages and keep the
        last 4. Settings are read when the extension loads, so the file comes first.
        """
    ),
    home_cell(
        "deerflow_nb_subagents_",
        """
        (HOME / "config.yaml").write_text(
            "summarization:\\n"
            "  trigger:\\n"
            "    - type: messages\\n"
            "      value: 6\\n"
            "  keep:\\n"
            "    type: messages\\n"
            "    value: 4\\n"
        )
        print((HOME / "config.yaml").read_text())
        """,
    ),
    code(
        """
        %load_ext deerflow_nb
        """
    ),
    SQL_HELPER,
    md(
        """
        ## 1. The agent can see your variables

        A small sales table. The agent has tools to list the notebook's variables and
        to describe one (type, shape, columns, dtypes, a few rows): it looks at the live
        object in the kernel, not at a copy you pasted into the prompt.
        """
    ),
    code(
        """
        sales = pd.DataFrame(
            {
                "region": ["North", "South", "East", "West"] * 3,
                "product": ["modem"] * 4 + ["router"] * 4 + ["sim"] * 4,
                "units": [12, 7, 9, 14, 3, 5, 8, 2, 40, 35, 28, 51],
                "price": [49.0] * 4 + [89.0] * 4 + [5.0] * 4,
            }
        )
        sales["revenue"] = sales["units"] * sales["price"]
        sales.shape
        """,
        "sales",
    ),
    code(
        """
        %%agent -t analysis
        Please describe sales.
        """,
        "describe",
    ),
    md(
        """
        The tool call and its result are journaled like any message: the assistant
        message carries `tool_calls`, the `tool` message carries the result. This is
        what the model actually read.
        """
    ),
    code(
        """
        sql(
            "SELECT seq, role, tool_calls, substr(content, 1, 200) AS content "
            "FROM messages WHERE thread_id = 'analysis' ORDER BY seq"
        )
        """,
        "describe-messages",
    ),
    md(
        """
        ## 2. Splitting a task across sub-agents

        When you ask for independent pieces of work "in parallel", the lead agent calls
        the `task` tool once per piece. Each call starts a **sub-agent**: a fresh,
        isolated thread with its own messages: it does not see your conversation, it
        has the notebook's read tools but cannot run code or start sub-agents itself.
        Sub-agents run concurrently (`subagents.max_concurrent`), and the lead agent
        only receives their final answers, which keeps its own context small. Their
        threads are never sent to memory extraction: they are the agent talking to
        itself, not you talking about yourself.
        """
    ),
    code(
        """
        %%agent -t analysis
        Use sub-agents in parallel for these:
        - Summarize sales by region
        - Find which product sells the most units
        - Draft three questions for the sales team about the West region
        """,
        "subagents",
    ),
    md(
        """
        Each sub-agent has its own row in `threads`, with `kind = 'subagent'` and
        `parent_id` pointing at the lead thread, and its own messages: the first one
        even called a notebook tool on the live `sales` DataFrame by itself. (The
        `analysis` thread has grown past 6 messages by now, so you may also see a
        "summarized" line in the reply: that is the next section's topic.)
        """
    ),
    code(
        """
        sql("SELECT id, kind, parent_id, title FROM threads ORDER BY created_at")
        """,
        "threads",
    ),
    code(
        """
        sql(
            "SELECT m.thread_id, m.seq, m.role, substr(m.content, 1, 120) AS content "
            "FROM messages m JOIN threads t ON t.id = m.thread_id "
            "WHERE t.kind = 'subagent' ORDER BY m.thread_id, m.seq"
        )
        """,
        "subagent-messages",
    ),
    md(
        """
        ## 3. A long thread gets summarized

        Now a chatty thread. With the trigger at 6 messages, after a few turns the
        summarization step (which runs *before* each model call) replaces the older
        messages by a summary and keeps the last 4 verbatim. The journal keeps every
        message; the summary is stored in the `summaries` table with `covers_until_seq`,
        the last message it replaces.
        """
    ),
    code(
        """
        %%agent -t long
        First, the data: our churn table has one row per customer and month.
        """
    ),
    code(
        """
        %%agent -t long
        Second, the label: a customer churns if they cancel within 30 days.
        """
    ),
    code(
        """
        %%agent -t long
        Third, the features: tenure, monthly charges, support calls and contract type.
        """
    ),
    code(
        """
        %%agent -t long
        Fourth, the metric: we report recall at a fixed 10 percent contact budget.
        """
    ),
    code(
        """
        %%agent -t long
        Fifth, what were the label and the metric again?
        """,
        "long-last",
    ),
    code(
        """
        sql("SELECT thread_id, covers_until_seq, tokens, content FROM summaries")
        """,
        "summaries",
    ),
    md(
        """
        ### What the model saw, before and after

        The journal holds the whole thread: that is what the model *would* have read
        without summarization. What it *did* read on the last call is kept on the
        agent's last turn (`last_turn.model_view`): the system prompt, with the summary
        appended to it, then only the recent messages. Token counts are exact
        (`cl100k_base`). With a real model and real conversations the savings are what
        keeps a long analysis session inside the context window.
        """
    ),
    code(
        """
        from deerflow_nb.session import get_session
        from deerflow_nb.tokens import count_tokens

        full = sql("SELECT seq, role, content, tokens FROM messages WHERE thread_id = 'long'")
        before = full.iloc[:-1]  # the thread up to the last question (the last row is the reply)
        seen = get_session(get_ipython()).agent().last_turn.model_view
        system, recent = seen[0]["content"], seen[1:]
        tag = "<conversation_summary>"
        summary = system[system.index(tag):] if tag in system else ""
        recent_tokens = sum(count_tokens(m.get("content") or "") for m in recent)

        print(f"without summarization: {len(before)} messages, {before.tokens.sum()} tokens")
        print(f"what the model saw:    a summary ({count_tokens(summary)} tokens) in the system "
              f"prompt + {len(recent)} recent messages ({recent_tokens} tokens)")
        print()
        print(summary)
        print()
        for message in recent:
            print(f"{message['role']:>9}: {(message.get('content') or '').strip()}")
        """,
        "before-after",
    ),
]


# --------------------------------------------------------------------------- real models
REAL_MODELS = [
    md(
        """
        # Connecting real models

        Everything in the other notebooks runs on the built-in offline model. Real
        models come in **by configuration only**: no code changes, the same magics.
        deerflow_nb talks to any **OpenAI-compatible** endpoint through the official
        `openai` SDK: OpenAI itself, Azure OpenAI, Ollama, vLLM, LM Studio, llama.cpp's
        server, LiteLLM, OpenRouter …

        Settings come from `config.yaml` in the home folder; environment variables win
        over the file:

        | variable | meaning |
        |---|---|
        | `OPENAI_API_KEY` | key for api.openai.com only (see the note below) |
        | `OPENAI_BASE_URL` | any OpenAI-compatible server |
        | `DEERFLOW_NB_MODEL` | chat model name |
        | `DEERFLOW_NB_MEMORY_MODEL` | model for memory extraction |
        | `DEERFLOW_NB_API_KEY` | key for the configured base URL |

        The ambient `OPENAI_API_KEY` is never sent to a custom base URL (a local or
        third-party server) unless `model.send_openai_key_to_base_url: true` says so.
        """
    ),
    md(
        """
        ## Example config.yaml files

        **OpenAI** (the key from the environment, `export OPENAI_API_KEY=sk-…`):

        ```yaml
        model:
          name: gpt-4o
        memory:
          model_name: gpt-4o-mini      # a cheaper model for memory extraction
        ```

        **Azure OpenAI** (its OpenAI-compatible `/openai/v1` endpoint; the model name
        is your *deployment* name):

        ```yaml
        model:
          name: my-gpt-4o-deployment
          base_url: https://YOUR-RESOURCE.openai.azure.com/openai/v1
          api_key: YOUR-AZURE-KEY      # or export DEERFLOW_NB_API_KEY
        ```

        **Ollama** (`ollama serve`, then `ollama pull llama3.1`; no key needed):

        ```yaml
        model:
          name: llama3.1
          base_url: http://localhost:11434/v1
          max_input_tokens: 8192       # the context window you run it with
        ```

        **vLLM / LM Studio / any OpenAI-compatible server**:

        ```yaml
        model:
          name: Qwen/Qwen2.5-7B-Instruct
          base_url: http://localhost:8000/v1    # LM Studio: http://localhost:1234/v1
        ```

        A single cell can also pick a model with `%%agent -m MODEL`.
        """
    ),
    md(
        """
        ## A cheaper memory model, and embeddings

        Memory extraction runs after turns, in the background, and only has to return a
        small JSON diff: a small model does it well and costs little. Set it with
        `memory.model_name` (or `DEERFLOW_NB_MEMORY_MODEL`); it is served by the same
        endpoint as the chat model.

        Fact ranking for injection uses BM25 by default, with no extra downloads. For
        semantic ranking, add dense embeddings (cached in the journal, so each fact is
        embedded once):

        ```yaml
        memory:
          model_name: gpt-4o-mini
          embeddings: openai:text-embedding-3-small   # through the same endpoint
          # embeddings: local:all-MiniLM-L6-v2        # CPU; needs deerflow-nb[embeddings]
        ```
        """
    ),
    md(
        """
        ## Try the real client path without a key

        If you have a key or a server, this notebook uses it. If not, the cell below
        starts the **loopback server**: a tiny OpenAI-compatible HTTP server on
        127.0.0.1 that serves the offline model (the same one `deerflow-nb serve-offline`
        runs). We point `OPENAI_BASE_URL` at it, so everything below goes through the
        real `openai` SDK over real HTTP (streaming and tool calls included), exactly as
        with Ollama or vLLM. The model names it serves are made up, to make the point
        that any name your server knows will do.
        """
    ),
    home_cell(
        "deerflow_nb_real_models_",
        """
        server = None
        if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
            from deerflow_nb.llm.server import start_server

            server = start_server(models=("loopback-chat", "loopback-mini", "loopback-embed"))
            os.environ["OPENAI_BASE_URL"] = server.base_url
            os.environ["DEERFLOW_NB_MODEL"] = "loopback-chat"
            os.environ["DEERFLOW_NB_MEMORY_MODEL"] = "loopback-mini"
            # Dense embeddings for fact ranking, from the same endpoint's /v1/embeddings.
            (HOME / "config.yaml").write_text("memory:\\n  embeddings: openai:loopback-embed\\n")
            print("loopback server:", server.base_url, "serving", ", ".join(server.models))
        """,
    ),
    md(
        """
        Settings are read when the extension loads, so the environment is set first.
        The settings object tells you what is in effect:
        """
    ),
    code(
        """
        %load_ext deerflow_nb

        from deerflow_nb.session import get_session

        settings = get_session(get_ipython()).settings
        print("offline model:", settings.is_offline)
        print("chat model:   ", settings.chat_model_name)
        print("memory model: ", settings.memory_model_name)
        print("base URL:     ", settings.model.base_url or "https://api.openai.com/v1")
        """,
        "settings",
    ),
    md(
        """
        ## A turn over HTTP

        The reply streams into the cell as the server sends it. With the loopback server
        the text still starts with `(offline model)`: that is the model behind the HTTP
        API, honest as always.
        """
    ),
    code(
        """
        %%agent -t real
        I work on demand forecasting for a bike-sharing company. I prefer LightGBM for tabular data.
        """,
        "turn",
    ),
    code(
        """
        if server is not None:
            print("requests served so far:", server.request_count)
        """,
        "requests-after-turn",
    ),
    md(
        """
        ## The memory model over HTTP too

        `%memory flush` asks the memory model (`loopback-mini` here, `gpt-4o-mini` in
        the OpenAI example) for the extraction diff, through the same endpoint in JSON
        mode. With `memory.embeddings` set, the new facts are also embedded right away
        (at fold time, not during your next turn). The request counter goes up again.
        """
    ),
    code(
        """
        %memory flush
        %memory facts
        """,
        "flush",
    ),
    code(
        """
        if server is not None:
            print("requests served so far:", server.request_count)
        """,
        "requests-after-flush",
    ),
    md(
        """
        ## Embeddings are cached in the journal

        Each fact text is embedded once per embedding model and stored in the
        journal's `embeddings` table (keyed by a hash of the text and the model), so a
        turn only has to embed its own message. `%memory search` ranks by the same
        scores the injection uses.
        """
    ),
    code(
        """
        %memory search which model do I like for tabular data
        """,
        "search",
    ),
    code(
        """
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(HOME / "journal.db")) as con:
            rows = con.execute("SELECT model, dim, count(*) FROM embeddings GROUP BY model, dim")
            for model, dim, count in rows:
                print(f"{count} cached vectors from {model!r} ({dim} dimensions)")
        """,
        "embeddings",
    ),
    md(
        """
        ## A new thread, with memory, over HTTP

        The whole loop, end to end through the SDK: the fact learned above is ranked for
        this message (its embedding was cached at fold time; only the question is
        embedded now), injected into the system prompt, and the model's reply streams
        back.
        """
    ),
    code(
        """
        %%agent -t real-2
        What do I prefer for tabular data?
        """,
        "fresh-answer",
    ),
    code(
        """
        if server is not None:
            print("requests served in total:", server.request_count)
        """,
        "requests-total",
    ),
    md(
        """
        ## Clean up

        Fold what is still queued, stop the loopback server (a real server you
        configured is left alone) and unload the extension. (Unloading alone would leave
        queued folds in the journal, for the next time memory opens on this home.)
        """
    ),
    code(
        """
        %memory flush
        %unload_ext deerflow_nb
        if server is not None:
            server.stop()
            print("loopback server stopped")
        """
    ),
]


NOTEBOOKS = {
    "quickstart.ipynb": QUICKSTART,
    "memory_tour.ipynb": MEMORY_TOUR,
    "subagents_and_summarization.ipynb": SUBAGENTS,
    "real_models.ipynb": REAL_MODELS,
}


def build(name: str, cells: list[tuple[str, str, list[str]]]) -> nbformat.NotebookNode:
    """A notebook without outputs and with stable cell ids, so rebuilding is a no-op."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    stem = Path(name).stem.replace("_", "-")
    for index, (kind, source, tags) in enumerate(cells):
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(source)
        else:
            cell = nbformat.v4.new_code_cell(source)
        cell.id = f"{stem}-{index:02d}"
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a notebook is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, cells in NOTEBOOKS.items():
        path = OUT / name
        text = render(build(name, cells))
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("stale (run scripts/build_notebooks.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
