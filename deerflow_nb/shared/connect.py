"""Connecting to the team's PostgreSQL, and the one-line errors that name the fix.

psycopg is imported here, inside functions, so ``%load_ext deerflow_nb`` never pays for
it. The password is never stored by deerflow_nb: libpq reads it from the URL given on
the command line, ``PGPASSWORD`` or ``~/.pgpass``. No message repeats a URL (it may hold
the password): they name the role, host, port and database only.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import quote, unquote, urlsplit, urlunsplit

if TYPE_CHECKING:
    import psycopg
    from psycopg import Connection as Connection  # the type, for code outside shared/

CONNECT_SECONDS = 5


class SharedError(ValueError):
    """A one-line error about the shared store, naming the fix (the CLI prints it as is)."""


def _unencoded(url: str) -> bool:
    """Whether ``url``'s user or password holds a ``/`` or an ``@`` a URL must write as
    ``%2F`` or ``%40``: libpq then reads part of the password as the host, port or
    database, which a message would repeat."""
    scheme, found, rest = url.partition("://")
    userinfo = rest.rpartition("@")[0]
    return bool(found) and scheme in ("postgres", "postgresql") and bool({"/", "@"} & set(userinfo))


UNENCODED = (
    "the URL's password (or role) holds '/' or '@', which a URL writes %2F and %40: "
    "percent-encode them, or put the password in PGPASSWORD or ~/.pgpass"
)


def where(url: str) -> str:
    """``role@host:port/database`` of ``url``, without its password."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    if _unencoded(url):
        return "the given URL"
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:  # a URL that does not parse: said by connection_error
        return "the given URL"
    role = parts.get("user") or "(your login)"
    return (
        f"{role}@{parts.get('host') or 'localhost'}:{parts.get('port') or 5432}"
        f"/{parts.get('dbname') or role}"
    )


def without_password(url: str) -> str:
    """``url`` with no password in it, as libpq reads one: ``user:password@``, a
    ``password`` parameter however it is spelled (``?pass%77ord=``), or a ``password=``
    word of a ``host=… password=…`` string. A URL keeps its form; whatever libpq would
    still find a password in is written again as ``key=value`` words without it."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    if _unencoded(url):  # the role alone, and where the server is
        scheme, _, rest = url.partition("://")
        userinfo, _, place = rest.rpartition("@")
        return f"{scheme}://{quote(unquote(userinfo.split(':')[0]), safe='')}@{place}"
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql"):
        netloc = parts.netloc
        if parts.password is not None:
            netloc = f"{parts.username or ''}@{netloc.rsplit('@', 1)[1]}"
        query = "&".join(
            q for q in parts.query.split("&") if q and unquote(q.split("=")[0]) != "password"
        )
        url = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    try:
        found = conninfo_to_dict(url)
    except psycopg.ProgrammingError:  # libpq cannot read it: nor can anyone connect with it
        return "(not a PostgreSQL URL)"
    if "password" not in found:
        return url
    return make_conninfo(**{k: v for k, v in found.items() if k != "password"})


def connection_error(url: str, exc: Exception) -> SharedError:
    """What went wrong connecting to ``url``, in one line naming the fix."""
    import psycopg

    text = str(exc)
    place = where(url)
    if isinstance(exc, psycopg.ProgrammingError):
        return SharedError(
            "not a PostgreSQL URL: write postgresql://ROLE@HOST:PORT/DATABASE (the password "
            "in PGPASSWORD or ~/.pgpass, not in a file of the home)"
        )
    if "password authentication failed" in text or "no password supplied" in text:
        return SharedError(
            f"PostgreSQL refused the password of {place}: set PGPASSWORD or add a ~/.pgpass "
            "line for it (deerflow_nb never stores a password)"
        )
    if "does not exist" in text:
        return SharedError(f"{place}: {_first_line(text)}; check the URL's role and database")
    if "Connection refused" in text or "timeout expired" in text or "resolve host" in text:
        return SharedError(
            f"PostgreSQL at {place} does not answer: start the server or check the URL's host "
            "and port (changes to shared projects wait in the outbox meanwhile)"
        )
    return SharedError(f"cannot connect to PostgreSQL at {place}: {_first_line(text)}")


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines and lines[0].startswith("connection failed") else lines[0]
    return line.removeprefix("FATAL:").strip()


def opened(url: str) -> psycopg.Connection:
    """A new autocommit connection to ``url`` (the caller closes it), within
    ``CONNECT_SECONDS``; ``SharedError`` naming the fix when it cannot be made."""
    import psycopg

    if _unencoded(url):
        raise SharedError(UNENCODED)
    try:
        return psycopg.connect(url, connect_timeout=CONNECT_SECONDS, autocommit=True)
    except psycopg.Error as exc:
        raise connection_error(url, exc) from None


@contextmanager
def connect(url: str) -> Iterator[psycopg.Connection]:
    """A connection to ``url``, closed afterwards; ``SharedError`` when it cannot be made,
    or when it is lost while in use (a server stopped or killed). It autocommits: every
    transaction is an explicit ``conn.transaction()``, so none is left open (or committed
    only at close, after the caller has believed it done)."""
    import psycopg

    conn = opened(url)
    with conn:
        try:
            yield conn
        except psycopg.OperationalError as exc:
            if not (conn.broken or conn.closed):
                raise
            raise SharedError(
                f"lost the connection to PostgreSQL at {where(url)} ({_first_line(str(exc))}): "
                "what was not committed is sent again on the next try"
            ) from None


@contextmanager
def kept(pool: dict[str, psycopg.Connection], url: str) -> Iterator[psycopg.Connection]:
    """``url``'s connection in ``pool`` (a background sync's, open across syncs), made when
    missing or broken; a lost one is closed, dropped and ``SharedError``: the next use
    connects again. Saves a connection's setup (and its authentication) on every sync."""
    import psycopg

    conn = pool.get(url)
    if conn is None or conn.closed or conn.broken:
        conn = pool[url] = opened(url)
    try:
        yield conn
    except psycopg.OperationalError as exc:
        if not (conn.broken or conn.closed):
            raise
        pool.pop(url, None)
        conn.close()
        raise SharedError(
            f"lost the connection to PostgreSQL at {where(url)} ({_first_line(str(exc))}): "
            "what was not committed is sent again on the next try"
        ) from None


def close_all(pool: dict[str, psycopg.Connection]) -> None:
    """Close every connection of ``pool`` and empty it."""
    while pool:
        pool.popitem()[1].close()


def refused(conn: psycopg.Connection, exc: Exception, project: str) -> NoReturn:
    """Raise the one line for a write the database refused (``exc``; its transaction rolled
    back): a read-only member, or a role that is no member of ``project``; ``exc`` itself
    when it is something else."""
    import psycopg

    if not isinstance(exc, psycopg.errors.InsufficientPrivilege):
        raise exc
    role, read_only = member_role(conn, project)
    if read_only:
        raise SharedError(
            f"{role} is a read-only member of project {project}: ask its owner to run "
            f"`{add_member_command(project, role)}` (without --read-only) to change it"
        ) from None
    raise no_member(role, project) from None


def member_role(conn: psycopg.Connection, project: str) -> tuple[str, bool | None]:
    """(the connection's role, whether it is a read-only member of ``project``: None when
    it is no member), as the database says."""
    row = conn.execute(
        "SELECT current_user, (SELECT read_only FROM deerflow.members WHERE project = %s"
        " AND role = current_user)",
        [project],
    ).fetchone()
    return (str(row[0]), row[1]) if row else ("this role", None)


def no_member(role: str, project: str) -> SharedError:
    """The one line for a role that is no member of ``project``, naming who can fix it."""
    return SharedError(
        f"{role} is no member of project {project}: ask its owner to run "
        f"`{add_member_command(project, role)}`"
    )


def add_member_command(project: str, role: str) -> str:
    """The ``deerflow-nb team add`` that makes ``role`` a member of ``project``, as its
    owner types it (``URL``: the shared store, as the owner connects to it)."""
    return f"deerflow-nb team add --url URL {shlex.quote(project)} {shlex.quote(role)}"
