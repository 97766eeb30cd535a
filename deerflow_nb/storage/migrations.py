"""journal.db's schema: the append-only named migrations, applied in order, each once.

In the manner of simonw/llm: each migration is recorded by name in ``_migrations`` when it
runs, and is never edited once shipped; a change of schema is a new migration at the end.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlite_utils

from .db import now_iso

Migration = Callable[[sqlite_utils.Database], None]
MIGRATIONS: list[tuple[str, Migration]] = []


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration, named after the function."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


@migration
def m001_threads_messages_turns(db: sqlite_utils.Database) -> None:
    db["threads"].create(
        {
            "id": str,
            "kind": str,  # lead | subagent
            "parent_id": str,
            "title": str,
            "model": str,
            "created_at": str,
            "updated_at": str,
        },
        pk="id",
    )
    db["turns"].create(
        {
            "id": str,
            "thread_id": str,
            "started_at": str,
            "ended_at": str,
            "status": str,  # running | ok | error | interrupted
            "model": str,
            "input_tokens": int,
            "output_tokens": int,
            "facts_injected": int,
            "error": str,
        },
        pk="id",
        foreign_keys=[("thread_id", "threads", "id")],
    )
    db["messages"].create(
        {
            "id": int,
            "thread_id": str,
            "turn_id": str,
            "seq": int,
            "role": str,
            "content": str,
            "tool_calls": str,  # JSON list in OpenAI's shape, or null
            "tool_call_id": str,
            "name": str,
            "tokens": int,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("thread_id", "threads", "id")],
    )
    db["messages"].create_index(["thread_id", "seq"], unique=True)
    db["turns"].create_index(["thread_id"])
    db["threads"].create_index(["parent_id"])


@migration
def m002_summaries(db: sqlite_utils.Database) -> None:
    db["summaries"].create(
        {
            "id": int,
            "thread_id": str,
            "covers_until_seq": int,  # messages with seq <= this are replaced by the summary
            "content": str,
            "tokens": int,
            "model": str,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("thread_id", "threads", "id")],
    )
    db["summaries"].create_index(["thread_id"])


@migration
def m003_memory_queue(db: sqlite_utils.Database) -> None:
    db["memory_queue"].create(
        {
            "thread_id": str,
            "snapshot": str,  # JSON list of the filtered messages to fold
            "enqueued_at": str,
            "due_at": float,  # epoch seconds: enqueue time + debounce
            "attempts": int,
            "last_error": str,
            "status": str,  # pending | failed
        },
        pk="thread_id",
    )


@migration
def m004_memory_events_versions(db: sqlite_utils.Database) -> None:
    db["memory_versions"].create(
        {
            "id": int,
            "created_at": str,
            "reason": str,  # fold | add | edit | forget | rollback | import | reset | approve
            "source": str,
            "snapshot": str,  # the whole memory.json after the change
            "fact_count": int,
        },
        pk="id",
    )
    db["memory_events"].create(
        {
            "id": int,
            "ts": str,
            "kind": str,  # add | reinforce | update | remove | evict | section | rollback | ...
            "fact_id": str,
            "section": str,
            "old_content": str,
            "new_content": str,
            "old_confidence": float,
            "new_confidence": float,
            "source": str,
            "version_id": int,
            "details": str,
        },
        pk="id",
    )
    db["memory_events"].create_index(["fact_id"])
    db["memory_events"].create_index(["version_id"])


@migration
def m005_pending_changes(db: sqlite_utils.Database) -> None:
    db["pending_changes"].create(
        {
            "id": int,
            "created_at": str,
            "source": str,
            "diff": str,  # the extraction diff waiting for review
            "status": str,  # pending | approved | rejected
            "decided_at": str,
        },
        pk="id",
    )


@migration
def m006_embeddings(db: sqlite_utils.Database) -> None:
    db["embeddings"].create(
        {"content_hash": str, "model": str, "dim": int, "vector": bytes, "created_at": str},
        pk=("content_hash", "model"),
    )


@migration
def m007_memory_queue_claims_and_settings(db: sqlite_utils.Database) -> None:
    """Queue claims (so two kernels never fold one row at once), per-thread fold progress
    (so a turn journaled just before a crash is still folded), and memory settings."""
    db["memory_queue"].add_column("last_seq", int)
    db["memory_queue"].add_column("claimed_by", str)
    db["memory_queue"].add_column("claimed_until", float)
    db["memory_threads"].create(
        {"thread_id": str, "folded_seq": int, "folded_at": str}, pk="thread_id"
    )
    db["memory_settings"].create({"key": str, "value": str}, pk="key")


@migration
def m008_private_turns(db: sqlite_utils.Database) -> None:
    """Turns run without memory (``--no-memory``): a fold never reads their messages, even
    when they land between two remembered turns of one thread."""
    db["turns"].add_column("private", int)


@migration
def m009_unwritten_versions(db: sqlite_utils.Database) -> None:
    """A version is journaled before memory.json is renamed into place and marked written
    after (``written = 0`` until then): a crash in between leaves a version to roll
    forward, never a memory.json change without its history."""
    db["memory_versions"].add_column("written", int)
    # Found through a partial index: scanning the rows would read every snapshot.
    db.execute(
        "CREATE INDEX memory_versions_unwritten ON memory_versions(written) WHERE written = 0"
    )


@migration
def m010_version_deltas_and_turn_owners(db: sqlite_utils.Database) -> None:
    """Versions as deltas between full snapshots (``memory/updates/versions.py``: a row holds
    ``snapshot`` or ``delta`` with its ``base_id``), found fast through the full ones; and
    which process runs each turn (``owner``), so a turn a killed kernel left ``running`` is
    marked interrupted when the home is next loaded, and a live kernel's is not."""
    db["memory_versions"].add_column("base_id", int)
    db["memory_versions"].add_column("delta", str)
    db.execute(
        "CREATE INDEX memory_versions_full ON memory_versions(id) WHERE snapshot IS NOT NULL"
    )
    db["turns"].add_column("owner", str)


@migration
def m011_memory_folds(db: sqlite_utils.Database) -> None:
    """What each fold did (issue 17, extraction): one row per fold or failed fold, with
    its outcome and a JSON report (added, reinforced, removed, evicted, sections, left out
    with reasons, held for review); ``Memory.status`` and the History views read it."""
    db["memory_folds"].create(
        {
            "id": int,
            "ts": str,
            "source": str,  # the thread id (or the caller's source for Memory.apply)
            "outcome": str,  # applied | partly applied | held for review | nothing to keep | failed
            "version_id": int,
            "pending_id": int,
            "report": str,  # JSON, see memory/folding/fold_log.py
            "error": str,
        },
        pk="id",
    )


# The conversation-recall index (``recall_index.py`` keeps it, ``memory/retrieval/recall.py``
# searches it): one row per user message and final assistant reply of a lead thread, outside
# ``--no-memory`` turns. ``recall_docs`` places each in its thread (``pos`` counts only indexed
# messages, so neighbours skip tool traffic); ``recall_fts`` is FTS5 over the messages' own text
# (external content: no second copy); ``recall_state`` holds the highest message id scanned. The
# index is brought up to date from ``messages`` before every search, and made again when a
# part of it is missing.
RECALL_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS recall_docs (id INTEGER PRIMARY KEY, thread_id TEXT NOT NULL,"
    " pos INTEGER NOT NULL, created_at TEXT)",
    "CREATE INDEX IF NOT EXISTS recall_docs_thread_pos ON recall_docs(thread_id, pos)",
    "CREATE INDEX IF NOT EXISTS recall_docs_created ON recall_docs(created_at)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS recall_fts USING fts5(content, content='messages',"
    " content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TABLE IF NOT EXISTS recall_state (key TEXT PRIMARY KEY, value INTEGER)",
)


@migration
def m012_recall_fts(db: sqlite_utils.Database) -> None:
    """Full-text index of lead threads' user messages and final replies (conversation
    recall); filled from ``messages`` by the first search, not here, so opening a large
    old journal stays fast."""
    for statement in RECALL_SCHEMA:
        db.execute(statement)


@migration
def m013_fact_usage(db: sqlite_utils.Database) -> None:
    """Per-fact use and confirmation records (issue 20, ``memory/updates/fact_use.py``):
    when each fact was last injected, last used (injected into a turn about it, or found by
    a search) and last re-confirmed by the user, with counts; upserted, so memory.json is
    never rewritten for them. Staleness review and the eviction blend read them
    (``memory/updates/aging.py``)."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS fact_usage (fact_id TEXT PRIMARY KEY, last_injected TEXT,"
        " injected INTEGER NOT NULL DEFAULT 0, last_used TEXT, used INTEGER NOT NULL DEFAULT 0,"
        " last_confirmed TEXT, confirmed INTEGER NOT NULL DEFAULT 0)"
    )


@migration
def m014_fact_injections(db: sqlite_utils.Database) -> None:
    """One row per turn that injected facts, the ids as a JSON list: a turn costs one insert
    where upserting a ``fact_usage`` row per injected fact cost a hundred. A ledger commit
    (every fold and edit) settles the rows into ``fact_usage``; reads add the unsettled
    ones (``storage/usage.py``)."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS fact_injections (id INTEGER PRIMARY KEY, at TEXT NOT NULL,"
        " fact_ids TEXT NOT NULL)"
    )


@migration
def m015_memory_changes(db: sqlite_utils.Database) -> None:
    """One row per change set through the gate (issue 26, ``memory/updates/gate.py``): its origin
    (user, model, fold, maintenance), kind, source, the agent turn of a ``remember``, how
    many facts it removed, evicted or merged away (``lost``) and what became of it. The wipe
    guard sums ``lost`` over the last day; ``remember`` is capped per turn."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS memory_changes (id INTEGER PRIMARY KEY, at TEXT NOT NULL,"
        " origin TEXT NOT NULL, reason TEXT NOT NULL, source TEXT, turn TEXT,"
        " lost INTEGER NOT NULL DEFAULT 0, outcome TEXT, version_id INTEGER, pending_id INTEGER)"
    )
    db.execute("CREATE INDEX IF NOT EXISTS memory_changes_at ON memory_changes(at)")
    db.execute("CREATE INDEX IF NOT EXISTS memory_changes_turn ON memory_changes(turn)")


@migration
def m016_server_traits_and_leases(db: sqlite_utils.Database) -> None:
    """What each model server has shown it accepts (the output-cap parameter, JSON schema
    output), learned once per home; and the leases of the foreground turns using a server
    now, so a fold in any kernel sharing the home gives the user's turn the server first
    (issue 31, ``storage/servers.py``)."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS server_traits (endpoint TEXT NOT NULL, trait TEXT NOT NULL,"
        " value TEXT NOT NULL, learned_at TEXT NOT NULL, PRIMARY KEY (endpoint, trait))"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS server_leases (id TEXT PRIMARY KEY, endpoint TEXT NOT NULL,"
        " owner TEXT NOT NULL, started_at TEXT NOT NULL)"
    )


@migration
def m017_thread_projects(db: sqlite_utils.Database) -> None:
    """The project a thread belongs to (issue 28): its fold stores project facts there, and
    recall and ``%memory projects`` read it. Threads from before have none (``default``)."""
    db["threads"].add_column("project", str)
    db.execute("CREATE INDEX IF NOT EXISTS threads_project ON threads(project)")


@migration
def m018_server_lease_heartbeats(db: sqlite_utils.Database) -> None:
    """A lease counts until its holder's heartbeat lapses (``expires_at``, epoch seconds), so
    a kernel that died on another host, or whose pid was reused, stops holding folds off
    (issue 36); and server rows and embeddings cache keys no longer name a server by an
    address holding ``user:pass@`` (``servers.forget_user_info``)."""
    from .servers import forget_user_info

    db["server_leases"].add_column("expires_at", float)
    forget_user_info(db)


@migration
def m019_shared_outbox(db: sqlite_utils.Database) -> None:
    """Change sets of shared projects (issue 39, ``storage/outbox.py``): each waits in
    ``shared_outbox`` until it is published to the team's PostgreSQL once
    (``published_at``), surviving a killed kernel or a server that is down; and
    ``shared_applied`` records every change set this home has applied, its own and its
    teammates', so one pulled twice is applied once."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS shared_outbox (id TEXT PRIMARY KEY, project TEXT NOT NULL,"
        " origin TEXT NOT NULL, turn TEXT, created_at TEXT NOT NULL, payload TEXT NOT NULL,"
        " published_at TEXT)"
    )
    db.execute(
        "CREATE INDEX IF NOT EXISTS shared_outbox_waiting ON shared_outbox(created_at)"
        " WHERE published_at IS NULL"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS shared_applied (id TEXT PRIMARY KEY, project TEXT NOT NULL,"
        " version INTEGER, applied_at TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX IF NOT EXISTS shared_applied_project ON shared_applied(project)")


@migration
def m020_event_projects(db: sqlite_utils.Database) -> None:
    """Whose fact or section each memory event is about (``project``: a project's name,
    ``''`` the user's), stamped as the gate journals it, so ``%memory history`` in one
    project never lists another's. Rows from before stay NULL: the reader tells whose
    they are from the section, the details or the fact (``readside/change_events.py``)."""
    db["memory_events"].add_column("project", str)


def migrate(db: sqlite_utils.Database) -> list[str]:
    """Inside a transaction: run the migrations ``db`` has not had yet, in order; their
    names (none when it was up to date). HomeError for another program's database (its
    tables are never touched) and for a newer deerflow-nb's journal."""
    if not db["_migrations"].exists():
        theirs = [t for t in db.table_names() if not t.startswith("sqlite_")]
        if theirs:
            from ..config import HomeError

            path = next((row[2] for row in db.execute("PRAGMA database_list")), "the journal")
            raise HomeError(
                f"{path} is another program's database (tables {', '.join(theirs[:3])}), not "
                "a deerflow_nb journal: move it aside, or point DEERFLOW_NB_HOME at another "
                "folder"
            )
    db["_migrations"].create({"name": str, "applied_at": str}, pk="name", if_not_exists=True)
    done = {row["name"] for row in db["_migrations"].rows}
    newer = sorted(done - {name for name, _ in MIGRATIONS})
    if newer:  # its tables are not what this version writes: writing could lose data
        from ..config import HomeError

        raise HomeError(
            f"journal.db is from a newer deerflow-nb (it has migration {newer[-1]}): "
            "upgrade this one (pip install -U deerflow-nb) to use this home"
        )
    ran = []
    for name, fn in MIGRATIONS:
        if name not in done:
            fn(db)
            db["_migrations"].insert({"name": name, "applied_at": now_iso()})
            ran.append(name)
    return ran


def applied(db: sqlite_utils.Database) -> list[str]:
    """The names of the migrations ``db`` has had, sorted."""
    return [r["name"] for r in db["_migrations"].rows_where(order_by="name")]
