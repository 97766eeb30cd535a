"""The shared store's schema on PostgreSQL: append-only named migrations, each run once.

As ``storage/migrations.py`` does for journal.db: each migration is recorded by name in
``deerflow.migrations`` when it runs and is never edited once shipped; a change of schema
is a new migration at the end. ``migrate`` runs them in one transaction under an
advisory lock, so two ``deerflow-nb team init`` at once cannot run one twice.

Who may do what is the database's job, not our Python's: every member is a login role in
the group ``deerflow_member``; row-level security lets a role read the rows of the
projects it is a member of and insert change sets only into those it may write, as
itself; no member may update or delete a change set (they are append-only), nor write
who sent a change set or when it was published. Since m002 a writer member may also
change its projects' current facts and summary (``store.py``), within the wipe guard, and
every role has rows of its own that only it reads. The owner of the tables (the role that
ran ``team init``) is not limited by the policies.
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
REVISION_LOCK = 3_900_040  # held by every commit and publish: revisions in order
GUARD_STATE = "DFW01"  # the SQLSTATE of the wipe guard's refusal


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


@migration
def m002_materialised_store(conn: psycopg.Connection) -> None:
    """The store contract on the server (``store.py``): facts, summaries, events and
    revisions, a role's own journal and fold queue; each published change set applied to
    its project's facts in the publishing transaction; and the wipe guard."""
    _run(conn, _STORE_TABLES + _STORE_FUNCTIONS + _STORE_TRIGGERS)
    for table in ("facts", "summaries", "events", "revisions", "threads", "messages", "queue"):
        _run(
            conn,
            (
                f"ALTER TABLE deerflow.{table} ENABLE ROW LEVEL SECURITY",
                f"GRANT SELECT ON deerflow.{table} TO {MEMBER_GROUP}",
            ),
        )
    mine = "(owner = current_user)"
    _run(
        conn,
        (
            "CREATE POLICY member_reads ON deerflow.facts FOR SELECT"
            " USING (deerflow.sees(project, owner))",
            "CREATE POLICY writer_writes ON deerflow.facts FOR ALL"
            " USING (deerflow.writes(project, owner)) WITH CHECK (deerflow.writes(project, owner))",
            "CREATE POLICY member_reads ON deerflow.summaries FOR SELECT"
            " USING (deerflow.sees(project, owner))",
            "CREATE POLICY writer_writes ON deerflow.summaries FOR ALL USING"
            " (deerflow.writes(project, owner)) WITH CHECK (deerflow.writes(project, owner))",
            "CREATE POLICY member_reads ON deerflow.events FOR SELECT"
            " USING (deerflow.sees(project, owner))",
            "CREATE POLICY writer_inserts ON deerflow.events FOR INSERT"
            " WITH CHECK (deerflow.writes(project, owner))",
            "CREATE POLICY member_reads ON deerflow.revisions FOR SELECT USING"
            " (person = current_user OR deerflow.is_member(project, current_user, false))",
            "CREATE POLICY member_inserts ON deerflow.revisions FOR INSERT"
            " WITH CHECK (person = current_user AND revision = deerflow.revision() + 1)",
            f"CREATE POLICY own_rows ON deerflow.threads FOR ALL USING {mine} WITH CHECK {mine}",
            f"CREATE POLICY own_rows ON deerflow.messages FOR ALL USING {mine} WITH CHECK {mine}",
            f"CREATE POLICY own_rows ON deerflow.queue FOR ALL USING {mine} WITH CHECK {mine}",
            "CREATE POLICY owner_sets_bound ON deerflow.projects FOR UPDATE"
            " USING (owner = current_user) WITH CHECK (owner = current_user)",
            "GRANT INSERT, UPDATE, DELETE ON deerflow.facts, deerflow.summaries,"
            f" deerflow.threads, deerflow.messages, deerflow.queue TO {MEMBER_GROUP}",
            f"GRANT INSERT ON deerflow.events TO {MEMBER_GROUP}",
            "GRANT INSERT (revision, origin, reason, source, project)"
            f" ON deerflow.revisions TO {MEMBER_GROUP}",
            "GRANT UPDATE (max_removals, max_removal_share)"
            f" ON deerflow.projects TO {MEMBER_GROUP}",
            f"GRANT USAGE ON SEQUENCE deerflow.fact_position TO {MEMBER_GROUP}",
            f"GRANT EXECUTE ON FUNCTION deerflow.revision() TO {MEMBER_GROUP}",
        ),
    )


# A row is a project's (``project`` named, ``owner`` '') or a role's own (``project`` '',
# ``owner`` the role): a user's facts and journal on the server are that role's alone.
# PostgreSQL's text holds no NUL character: a text with one is kept exactly in ``raw`` (a
# JSON string; ``json``, unlike ``jsonb``, keeps ``\\u0000``), ``content`` without it.
_STORE_TABLES = (
    "ALTER TABLE deerflow.projects ADD COLUMN max_removals integer NOT NULL DEFAULT 20"
    " CHECK (max_removals >= 0), ADD COLUMN max_removal_share real NOT NULL DEFAULT 0.5"
    " CHECK (max_removal_share BETWEEN 0 AND 1)",
    "CREATE SEQUENCE deerflow.fact_position",
    "CREATE TABLE deerflow.facts (project text NOT NULL DEFAULT '', owner name NOT NULL"
    " DEFAULT '', id text NOT NULL, content text NOT NULL, category text NOT NULL,"
    " confidence double precision NOT NULL, raw json, extra json NOT NULL DEFAULT '{}',"
    " position bigint NOT NULL DEFAULT nextval('deerflow.fact_position'),"
    " person name NOT NULL DEFAULT current_user, origin text,"
    " updated timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (project, owner, id),"
    " CHECK ((project = '') <> (owner = '')))",
    "CREATE INDEX facts_by_id ON deerflow.facts (id)",
    "CREATE TABLE deerflow.summaries (project text NOT NULL DEFAULT '', owner name NOT NULL"
    " DEFAULT '', key text NOT NULL, text text NOT NULL, raw json, person name NOT NULL DEFAULT"
    " current_user, updated timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (project, owner,"
    " key), CHECK ((project = '') <> (owner = '')))",
    # One row per transaction that changed memory (a commit, a publish): the revision
    # and its provenance.
    "CREATE TABLE deerflow.revisions (revision bigint PRIMARY KEY, project text,"
    " person name NOT NULL DEFAULT current_user, origin text, reason text, source text,"
    " created timestamptz NOT NULL DEFAULT now(),"
    " xact xid8 NOT NULL UNIQUE DEFAULT pg_current_xact_id())",
    "CREATE TABLE deerflow.events (revision bigint NOT NULL REFERENCES deerflow.revisions,"
    " seq integer NOT NULL, project text NOT NULL DEFAULT '', owner name NOT NULL DEFAULT '',"
    " event json NOT NULL, PRIMARY KEY (revision, seq))",
    "CREATE TABLE deerflow.removals (project text NOT NULL REFERENCES deerflow.projects(name)"
    " ON DELETE CASCADE, day date NOT NULL, removed integer NOT NULL DEFAULT 0,"
    " PRIMARY KEY (project, day))",
    "CREATE TABLE deerflow.threads (owner name NOT NULL DEFAULT current_user, id text NOT NULL,"
    " project text NOT NULL, PRIMARY KEY (owner, id))",
    "CREATE TABLE deerflow.messages (owner name NOT NULL DEFAULT current_user, thread text"
    " NOT NULL, seq integer NOT NULL, message json NOT NULL, PRIMARY KEY (owner, thread, seq))",
    "CREATE TABLE deerflow.queue (owner name NOT NULL DEFAULT current_user, thread text NOT NULL,"
    " due timestamptz NOT NULL, through_seq integer NOT NULL, lease_owner text,"
    " lease_until timestamptz, PRIMARY KEY (owner, thread))",
)

_DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, pg_temp"
_CATEGORIES = "('preference', 'knowledge', 'context', 'behavior', 'goal', 'correction')"
_STORE_FUNCTIONS = (
    "CREATE FUNCTION deerflow.sees(project text, owner name) RETURNS boolean LANGUAGE sql"
    " STABLE AS $$ SELECT CASE WHEN $1 = '' THEN $2 = current_user"
    " ELSE deerflow.is_member($1, current_user, false) END $$",
    "CREATE FUNCTION deerflow.writes(project text, owner name) RETURNS boolean LANGUAGE sql"
    " STABLE AS $$ SELECT CASE WHEN $1 = '' THEN $2 = current_user"
    " ELSE $2 = '' AND deerflow.is_member($1, current_user, true) END $$",
    # Who wrote a row and when are the server's to say: a member's write is stamped with
    # its role and the time (the owner's, applying a change set, keeps its sender).
    "CREATE FUNCTION deerflow.stamp() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " IF NEW.owner = current_user OR deerflow.is_member(NEW.project, current_user, false)"
    " THEN NEW.person := current_user; NEW.updated := now(); END IF; RETURN NEW; END $$",
    # The database's revision: the newest, whoever made it (no row of it is shown).
    f"CREATE FUNCTION deerflow.revision() RETURNS bigint LANGUAGE sql STABLE {_DEFINER} AS $$"
    " SELECT coalesce(max(revision), 0) FROM deerflow.revisions $$",
    "REVOKE ALL ON FUNCTION deerflow.revision() FROM PUBLIC",
    # The wipe guard: a project's facts removed in one UTC day, across all members, are
    # at most max(max_removals, max_removal_share x the facts it had that day).
    f"CREATE FUNCTION deerflow.fact_removed() RETURNS trigger LANGUAGE plpgsql {_DEFINER} AS $$"
    " DECLARE p deerflow.projects; n integer; still bigint; bound integer; BEGIN"
    " IF OLD.project = '' OR (TG_OP = 'UPDATE' AND NEW.project = OLD.project"
    " AND NEW.owner = OLD.owner) THEN RETURN NULL; END IF;"
    " SELECT * INTO p FROM deerflow.projects WHERE name = OLD.project;"
    " IF NOT FOUND THEN RETURN NULL; END IF;"
    " INSERT INTO deerflow.removals AS r (project, day, removed)"
    " VALUES (OLD.project, (now() AT TIME ZONE 'UTC')::date, 1)"
    " ON CONFLICT (project, day) DO UPDATE SET removed = r.removed + 1 RETURNING removed INTO n;"
    " SELECT count(*) INTO still FROM deerflow.facts WHERE project = OLD.project;"
    " bound := greatest(p.max_removals, floor(p.max_removal_share * (still + n))::integer);"
    f" IF n > bound THEN RAISE EXCEPTION USING ERRCODE = '{GUARD_STATE}', MESSAGE = format("
    "'project %s: %s of its facts removed today (UTC) would pass the bound of %s',"
    " OLD.project, n, bound), HINT = format('its owner raises it with `deerflow-nb team"
    " limit %s N`', OLD.project); END IF; RETURN NULL; END $$",
    # A published change set's effect (``team_changes.shared_effect``) on its project's
    # facts and summary, as a member's home applies it (``apply_team``).
    "CREATE FUNCTION deerflow.apply_change_set(p text, who name, payload jsonb)"
    f" RETURNS void LANGUAGE plpgsql {_DEFINER} AS $$"
    " DECLARE d jsonb := payload->'diff'; f jsonb; e jsonb; t text; BEGIN"
    " IF jsonb_typeof(d) IS DISTINCT FROM 'object' THEN RETURN; END IF;"
    " IF jsonb_typeof(d->'factsToRemove') = 'array' THEN"
    " DELETE FROM deerflow.facts WHERE project = p AND owner = '' AND id IN"
    " (SELECT jsonb_array_elements_text(d->'factsToRemove')); END IF;"
    " IF jsonb_typeof(d->'edits') = 'array' THEN"
    " FOR e IN SELECT * FROM jsonb_array_elements(d->'edits') LOOP"
    " CONTINUE WHEN jsonb_typeof(e) IS DISTINCT FROM 'object';"
    " UPDATE deerflow.facts SET content = CASE WHEN btrim(coalesce(e->>'content', '')) <> ''"
    " THEN e->>'content' ELSE content END,"
    f" category = CASE WHEN e->>'category' IN {_CATEGORIES} THEN e->>'category'"
    " ELSE category END, confidence = CASE WHEN jsonb_typeof(e->'confidence') = 'number'"
    " THEN least(greatest((e->>'confidence')::float8, 0), 1) ELSE confidence END,"
    " person = who, updated = now() WHERE project = p AND owner = '' AND id = e->>'id';"
    " END LOOP; END IF;"
    " IF jsonb_typeof(d->'newFacts') = 'array' THEN"
    " FOR f IN SELECT * FROM jsonb_array_elements(d->'newFacts') LOOP"
    " CONTINUE WHEN jsonb_typeof(f) IS DISTINCT FROM 'object'"
    " OR coalesce(f->>'id', '') !~ '^[[:alnum:]_.-]{1,64}$';"
    " t := btrim(coalesce(f->>'content', ''));"
    " CONTINUE WHEN t = '' OR EXISTS (SELECT 1 FROM deerflow.facts x"
    " WHERE x.project = p AND x.owner = '' AND x.content = t);"
    " INSERT INTO deerflow.facts (project, id, content, category, confidence, extra, person,"
    " origin) VALUES (p, f->>'id', t,"
    f" CASE WHEN f->>'category' IN {_CATEGORIES} THEN f->>'category' ELSE 'context' END,"
    " CASE WHEN jsonb_typeof(f->'confidence') = 'number'"
    " THEN least(greatest((f->>'confidence')::float8, 0), 1) ELSE 0.9 END,"
    " jsonb_strip_nulls(jsonb_build_object('createdAt', f->'createdAt', 'addedBy',"
    " f->'addedBy', 'person', coalesce(f->'person', to_jsonb(who::text)),"
    " 'source', 'team'))::json, who, payload->>'origin') ON CONFLICT DO NOTHING;"
    " END LOOP; END IF;"
    " IF jsonb_typeof(d->'projectContext') = 'object' THEN"
    " t := coalesce(d->'projectContext'->>'summary', '');"
    " IF NOT EXISTS (SELECT 1 FROM deerflow.summaries WHERE project = p AND owner = ''"
    " AND key = 'projects.' || p AND text = t) THEN"
    " DELETE FROM deerflow.summaries WHERE project = p AND owner = '' AND key = 'projects.' || p;"
    " IF t <> '' THEN INSERT INTO deerflow.summaries (project, key, text, person)"
    " VALUES (p, 'projects.' || p, t, who); END IF; END IF; END IF; END $$",
    # Replaces m001's: the advisory lock first (the store's commit takes it before any
    # project row), then the version, the transaction's revision (one per transaction: a
    # publish of several, or a store commit that made this change set), and the change set
    # applied (after a store commit's own writes, a no-op).
    "CREATE OR REPLACE FUNCTION deerflow.change_set_published() RETURNS trigger"
    f" LANGUAGE plpgsql {_DEFINER} AS $$ DECLARE v bigint; BEGIN"
    f" PERFORM pg_advisory_xact_lock({REVISION_LOCK});"
    " UPDATE deerflow.projects SET version = version + 1 WHERE name = NEW.project"
    " RETURNING version INTO v;"
    " INSERT INTO deerflow.versions (project, version, change_set)"
    " VALUES (NEW.project, v, NEW.id);"
    " INSERT INTO deerflow.revisions (revision, project, person, origin, reason, source)"
    " VALUES (deerflow.revision() + 1, NEW.project, NEW.person, NEW.origin,"
    " NEW.payload->>'reason', 'team') ON CONFLICT (xact) DO NOTHING;"
    " PERFORM deerflow.apply_change_set(NEW.project, NEW.person, NEW.payload);"
    f" PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$",
)
_STORE_TRIGGERS = (
    "CREATE TRIGGER facts_stamped BEFORE INSERT OR UPDATE ON deerflow.facts"
    " FOR EACH ROW EXECUTE FUNCTION deerflow.stamp()",
    "CREATE TRIGGER summaries_stamped BEFORE INSERT OR UPDATE ON deerflow.summaries"
    " FOR EACH ROW EXECUTE FUNCTION deerflow.stamp()",
    "CREATE TRIGGER facts_removed AFTER DELETE OR UPDATE OF project, owner ON deerflow.facts"
    " FOR EACH ROW EXECUTE FUNCTION deerflow.fact_removed()",
)


# m002's notice with who published it (as ``md5(role)``: a member of another project learns
# no name), so a kernel does not pull again for the change sets it published itself.
_NOTICE_OF = "md5(NEW.person::text)"


@migration
def m003_notice_names_the_publisher(conn: psycopg.Connection) -> None:
    """The published-change-set notice carries ``md5`` of the publisher's role."""
    silent = f"pg_notify('{CHANNEL}', '')"
    conn.execute(_STORE_FUNCTIONS[-1].replace(silent, f"pg_notify('{CHANNEL}', {_NOTICE_OF})"))


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
