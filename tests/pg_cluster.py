"""A real PostgreSQL for the tests: a cluster in a temporary folder, on 127.0.0.1.

``postgres`` (session-scoped) runs Debian's ``initdb`` and ``pg_ctl`` into a fresh folder
under the system's temporary directory, listening on a free loopback port with its unix
socket in that folder, and yields a ``PgCluster`` with a superuser URL; it stops the
server (``pg_ctl stop -m fast``) and removes the folder at the end. PostgreSQL refuses to
run as root, so as root the server runs as ``postgres`` (or ``nobody``), which owns the
folder. ``fsync`` is off, for speed: a server killed with SIGKILL still keeps what it
committed (the kernel's page cache holds it); only a machine crash, which no test makes,
would lose it. It is skipped, with the reason, only when no ``/usr/lib/postgresql/*/bin/initdb``
is installed (``make test`` installs Debian's ``postgresql``).
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

SUPERUSER = "deerflow_admin"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian's layout), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgCluster:
    """One running cluster: ``url`` (the superuser's), ``port``, ``folder``, and
    ``url_for(role, password)``; ``stop``/``start`` (or ``kill``) for tests of a dead server."""

    def __init__(self, bin_dir: Path, folder: Path, user: str | None) -> None:
        self.bin_dir = bin_dir
        self.folder = folder
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.user = user
        self.password = secrets.token_hex(12)
        self.port = free_port()
        self.url = self.url_for(SUPERUSER, self.password)
        self.started_in = 0.0  # seconds from initdb to accepting connections

    def url_for(self, role: str, password: str, database: str = "postgres") -> str:
        """A URL with the password in it (tests only: the package never stores one)."""
        return f"postgresql://{quote(role)}:{quote(password)}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        prefix = []
        if self.user:
            uid = pwd.getpwnam(self.user)
            prefix = ["setpriv", f"--reuid={uid.pw_uid}", f"--regid={uid.pw_gid}", "--clear-groups"]
        return subprocess.run(
            [*prefix, *args], cwd=self.folder, capture_output=True, text=True, check=False
        )

    def _check(self, *args: str) -> None:
        done = self._run(*args)
        if done.returncode:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout}{done.stderr}\n{log}")

    def init(self) -> None:
        pwfile = self.folder / "pw"
        pwfile.write_text(self.password + "\n")
        if self.user:
            uid = pwd.getpwnam(self.user)
            os.chown(self.folder, uid.pw_uid, uid.pw_gid)
            os.chown(pwfile, uid.pw_uid, uid.pw_gid)
        self._check(
            str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
            f"--pwfile={pwfile}", "--auth-local=scram-sha-256", "--auth-host=scram-sha-256",
            "--no-sync", "--no-instructions", "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        pwfile.unlink()

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} "
            "-c fsync=off -c full_page_writes=off -c shared_buffers=16MB -c max_connections=60"
        )
        command = (
            str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
            "-o", options, "-w", "-t", "30", "start",
        )  # fmt: skip
        for _ in range(20):  # after a kill, until the old server's processes have gone
            if self._run(*command).returncode == 0:
                return
            time.sleep(0.25)
        self._check(*command)

    def stop(self) -> None:
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def kill(self) -> None:
        """SIGKILL the postmaster (as a crash would): no shutdown, no checkpoint."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 9)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)


def server_user() -> str | None:
    """Who runs the server: this user, or as root the ``postgres`` system user (``nobody``
    when there is none); PostgreSQL refuses to run as root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and no postgres or nobody user to run PostgreSQL as")


def temp_root(user: str | None) -> str:
    """The system's temporary folder, or ``/tmp`` when ``user`` (the server's, not this
    process's) could not reach a folder inside it (a ``TMPDIR`` under ``/root``)."""
    root = Path(tempfile.gettempdir()).resolve()
    reachable = all(p.stat().st_mode & stat.S_IXOTH for p in (root, *root.parents))
    return str(root) if user is None or reachable else "/tmp"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgCluster]:
    """A running PostgreSQL for the session (``PgCluster``), stopped and removed after."""
    bin_dir = pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed: no /usr/lib/postgresql/*/bin/initdb (make test)")
    user = server_user()
    folder = Path(tempfile.mkdtemp(prefix="deerflow-pg-", dir=temp_root(user)))
    cluster = PgCluster(bin_dir, folder, user)
    try:
        started = time.monotonic()
        cluster.init()
        cluster.start()
        cluster.started_in = time.monotonic() - started
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


TEMPLATE = "deerflow_store_template"


def migrated_database(cluster: PgCluster) -> str:
    """The superuser's URL of a new database with the shared schema (copied from a template
    migrated once per cluster, so a test or a hypothesis example gets its own quickly)."""
    import psycopg

    from deerflow_nb.shared import team

    with psycopg.connect(cluster.url, autocommit=True) as conn:
        made = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [TEMPLATE]).fetchone()
        if not made:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
            team.init(cluster.url_for(SUPERUSER, cluster.password, TEMPLATE))
        name = f"store_{secrets.token_hex(6)}"
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    return cluster.url_for(SUPERUSER, cluster.password, name)


def drop_database(cluster: PgCluster, url: str) -> None:
    """Remove the database of ``url`` (one of ``migrated_database``'s), its sessions closed."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
