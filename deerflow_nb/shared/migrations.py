"""The shared store's schema on PostgreSQL: append-only named migrations, each run once.

As ``storage/migrations.py`` does for journal.db: each migration is recorded by name in
``deerflow.migrations`` when it runs and is never edited once shipped; a change of schema
is a new migration at the end. ``migrate`` runs them in one transaction under an
advisory lock, so two ``deerflow-nb team init`` at once cannot run one twice.

Who may do what is the database's job, not our Python's: every member is a login role in
the group ``deerflow_member``; row-level security lets a role read the rows of the
projects it is a member of and insert change sets only into those it may write, as
itself; no member may update or delete anything (change sets are append-only), nor write
who sent a change set or when it was published. The owner
of the tables (the role that ran ``team init``) is not limited by the policies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

Migration = Callable[["psycopg.Connection"], None]
MIGRATIONS: list[tuple[str, Migration]] = []
MEMBER_GROUP = "deerflow_member"
CHANNEL = "deerflow_change_sets"  # NOTIFY on every published change set (no payload)
LOCK_KEY = 3_900_039  # pg_advisory_xact_lock: one migrating session at a time


def migration(fn: Migration) -> Migration:
    """Register ``fn`` as the next migration, named after the function."""
    MIGRATIONS.append((fn.__name__, fn))
    return fn


def _run(conn: psycopg.Connection, statements: tuple[str, ...]) -> None:
    for statement in statements:
        conn.execute(statement)


@migration
def m001_projects_members_change_sets(conn: psycopg.Connection) -> None:
    """Projects, their members (a role each, read-only or not), the change sets published
    to them (the typed ``ChangeSet`` as ``payload``, with who sent it, its origin, turn
    and time) and each project's versions: a change set's insert makes the project's next
    version, under the project row's lock, so versions commit in order and a reader that
    has seen version N has seen every one before it."""
    _run(
        conn,
        (
            f"DO $$ BEGIN CREATE ROLE {MEMBER_GROUP} NOLOGIN;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$",
            "CREATE TABLE deerflow.projects (name text PRIMARY KEY,"
            " owner name NOT NULL DEFAULT current_user, version bigint NOT NULL DEFAULT 0,"
            " created timestamptz NOT NULL DEFAULT now())",
            "CREATE TABLE deerflow.members (project text NOT NULL"
            " REFERENCES deerflow.projects(name) ON DELETE CASCADE, role name NOT NULL,"
            " read_only boolean NOT NULL DEFAULT false,"
            " added timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (project, role))",
            "CREATE TABLE deerflow.change_sets (id uuid PRIMARY KEY, project text NOT NULL"
            " REFERENCES deerflow.projects(name), origin text NOT NULL"
            " CHECK (origin IN ('user', 'model', 'fold', 'maintenance')),"
            " person name NOT NULL DEFAULT current_user, turn text,"
            " created timestamptz NOT NULL, published timestamptz NOT NULL DEFAULT now(),"
            " payload jsonb NOT NULL)",
            "CREATE TABLE deerflow.versions (project text NOT NULL"
            " REFERENCES deerflow.projects(name), version bigint NOT NULL,"
            " change_set uuid NOT NULL UNIQUE REFERENCES deerflow.change_sets(id),"
            " created timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (project, version))",
            # The policies' one question, asked with the owner's rights (members cannot read
            # the whole members table; a policy on it that read itself would recurse).
            "CREATE FUNCTION deerflow.is_member(project text, who name, writing boolean)"
            " RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER"
            " SET search_path = pg_catalog, pg_temp AS $$ SELECT EXISTS (SELECT 1 FROM"
            " deerflow.members m WHERE m.project = $1 AND m.role = $2"
            " AND (NOT $3 OR NOT m.read_only)) $$",
            "REVOKE ALL ON FUNCTION deerflow.is_member(text, name, boolean) FROM PUBLIC",
            "CREATE FUNCTION deerflow.change_set_published() RETURNS trigger"
            " LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$"
            " DECLARE v bigint; BEGIN"
            " UPDATE deerflow.projects SET version = version + 1 WHERE name = NEW.project"
            " RETURNING version INTO v;"
            " INSERT INTO deerflow.versions (project, version, change_set)"
            " VALUES (NEW.project, v, NEW.id);"
            f" PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$",
            # AFTER: a change set ON CONFLICT DO NOTHING skipped makes no version.
            "CREATE TRIGGER change_sets_published AFTER INSERT ON deerflow.change_sets"
            " FOR EACH ROW EXECUTE FUNCTION deerflow.change_set_published()",
        ),
    )
    reads = "FOR SELECT USING (deerflow.is_member({}, current_user, false))"
    for table, column in (
        ("projects", "name"),
        ("members", "project"),
        ("change_sets", "project"),
        ("versions", "project"),
    ):
        _run(
            conn,
            (
                f"ALTER TABLE deerflow.{table} ENABLE ROW LEVEL SECURITY",
                f"CREATE POLICY member_reads ON deerflow.{table} " + reads.format(column),
            ),
        )
    _run(
        conn,
        (
            "CREATE POLICY writer_inserts ON deerflow.change_sets FOR INSERT WITH CHECK"
            " (deerflow.is_member(project, current_user, true) AND person = current_user)",
            f"GRANT USAGE ON SCHEMA deerflow TO {MEMBER_GROUP}",
            f"GRANT EXECUTE ON FUNCTION deerflow.is_member(text, name, boolean) TO {MEMBER_GROUP}",
            "GRANT SELECT ON deerflow.projects, deerflow.members, deerflow.versions"
            f" TO {MEMBER_GROUP}",
            # Column by column: ``person`` (current_user) and ``published`` (now()) are
            # the server's to write, never a member's.
            f"GRANT SELECT ON deerflow.change_sets TO {MEMBER_GROUP}",
            "GRANT INSERT (id, project, origin, turn, created, payload)"
            f" ON deerflow.change_sets TO {MEMBER_GROUP}",
        ),
    )


def migrate(conn: psycopg.Connection) -> list[str]:
    """In one transaction: create the ``deerflow`` schema if missing and run the migrations
    it has not had, in order; their names (none when it was up to date)."""
    ran = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        conn.execute("CREATE SCHEMA IF NOT EXISTS deerflow")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS deerflow.migrations (name text PRIMARY KEY,"
            " applied timestamptz NOT NULL DEFAULT now())"
        )
        done = {row[0] for row in conn.execute("SELECT name FROM deerflow.migrations")}
        for name, fn in MIGRATIONS:
            if name not in done:
                fn(conn)
                conn.execute("INSERT INTO deerflow.migrations (name) VALUES (%s)", [name])
                ran.append(name)
    return ran


def applied(conn: psycopg.Connection) -> list[str]:
    """The names of the migrations the database has had, sorted."""
    rows = conn.execute("SELECT name FROM deerflow.migrations ORDER BY name").fetchall()
    return [row[0] for row in rows]
