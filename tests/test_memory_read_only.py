"""The read door (``memory.open_reader``): reading a home changes no byte on disk.

Every read a reader offers runs against a home with history, and the whole tree — names,
bytes, modes — is compared before and after; then the same reads run on a read-only copy
(a read-only bind mount, and a folder its unprivileged reader may not write), where any
write would fail.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deerflow_nb.cli import main as cli_main
from deerflow_nb.config import HomeError
from deerflow_nb.memory import Memory, MemoryReader, Scope, open_reader
from deerflow_nb.storage.db import connect
from deerflow_nb.storage.migrations import MIGRATIONS

ROOT = Path(__file__).resolve().parents[1]
ALL = Scope.everywhere()


def tree(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``folder`` with its mode and (for a file) its bytes."""
    return {
        str(p.relative_to(folder)): (p.stat().st_mode, p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    } | {".": (folder.stat().st_mode, None)}


@pytest.fixture
def lived_in(home: Path) -> Path:
    """A home with facts, versions, events, a pending proposal, a thread and a fold."""
    with Memory(home) as mem:
        mem.add_fact("I prefer polars over pandas", "preference")
        fact = mem.add_fact("Works on churn models", "context")
        mem.facts.edit(fact["id"], confidence=0.95)
        mem.journal.ensure_thread("t1", title="Sales")
        mem.journal.add_message("t1", {"role": "user", "content": "I use duckdb at work"})
        mem.journal.add_message("t1", {"role": "assistant", "content": "Noted."})
        mem.review.enabled = True
        mem.apply({"newFacts": [{"content": "Uses duckdb", "category": "knowledge"}]}, "t1")
    assert not (home / "journal.db-wal").exists()  # closed: no writer is live
    return home


def every_read(reader: MemoryReader) -> dict[str, Any]:
    """Each of the reader's reads once; a summary small enough to compare and print."""
    versions = reader.versions()
    pending = reader.pending()
    return {
        "facts": [f["content"] for f in reader.facts()],
        "status": {k: v for k, v in reader.status().items() if k not in ("last_fold",)},
        "versions": len(versions),
        "first": len(reader.version(versions[0]["id"]).get("facts", [])) if versions else None,
        "diff": len(reader.diff(versions[0]["id"])["added"]) if versions else None,
        "events": len(reader.events()),
        "history": [len(reader.history(f["id"])) for f in reader.facts()],
        "pending": [len(reader.review_items(c)) for c in pending],
        "review": reader.review,
        "folds": len(reader.folds()),
        "threads": [t["id"] for t in reader.threads()],
        "messages": len(reader.message_rows("t1")),
        "usage": len(reader.usage()),
        "sizes": len(reader.version_sizes()),
        "queue": len(reader.queue()),
        "recall": [hit["content"] for hit in reader.recall("duckdb at work", 5)],
        "search": [f["content"] for f, _ in reader.search("polars", scope=ALL)],
        "preview": reader.preview("which dataframe library?"),
        "explain": [w["fact"]["id"] for w in reader.explain("churn", 200)[1]],
    }


def test_reading_every_view_changes_no_byte(lived_in: Path) -> None:
    before = tree(lived_in)
    with open_reader(lived_in) as reader:
        seen = every_read(reader)
    assert tree(lived_in) == before
    assert seen["facts"] == ["Works on churn models", "I prefer polars over pandas"]
    assert seen["versions"] >= 3 and seen["pending"] == [1] and seen["review"] is True
    assert seen["threads"] == ["t1"] and seen["messages"] == 2
    assert seen["recall"][0] == "I use duckdb at work"  # its index caught up in memory only


def test_recall_searches_a_caught_up_index_in_place(lived_in: Path) -> None:
    with Memory(lived_in) as mem:  # a writer's search catches the file's index up
        assert mem.recall("duckdb at work")[0]["content"] == "I use duckdb at work"
        mem.journal.add_message("t1", {"role": "user", "content": "and polars for speed"})
        assert mem.recall("polars speed")[0]["content"] == "and polars for speed"
    before = tree(lived_in)
    with open_reader(lived_in) as reader:
        assert reader.recall("polars speed", 5)[0]["content"] == "and polars for speed"
        assert reader.recall("duckdb at work", 5)[0]["content"] == "I use duckdb at work"
    assert tree(lived_in) == before


def test_a_missing_home_stays_missing(tmp_path: Path) -> None:
    home = tmp_path / "never-made"
    with open_reader(home) as reader:
        assert reader.facts() == [] and reader.status()["fact_count"] == 0
        assert reader.versions() == [] and reader.pending() == []
    assert not home.exists()


def test_a_damaged_memory_json_is_said_and_no_copy_is_written(lived_in: Path) -> None:
    (lived_in / "memory.json").write_bytes(b'{"facts": [')
    before = tree(lived_in)
    with open_reader(lived_in) as reader:
        status = reader.status()
    assert "nothing was written" in status["memory_error"] and "rollback" in status["memory_error"]
    assert tree(lived_in) == before


def test_reads_beside_a_live_writer_see_its_commits(home: Path) -> None:
    with Memory(home) as mem:
        mem.add_fact("Uses uv for environments", "knowledge")
        assert (home / "journal.db-wal").exists()  # a live writer: read beside it
        with open_reader(home) as reader:
            assert [f["content"] for f in reader.facts()] == ["Uses uv for environments"]
            assert len(reader.versions()) == 1
        mem.add_fact("Plots with altair", "preference")
        with open_reader(home) as reader:
            assert len(reader.versions()) == 2


def old_journal(home: Path, migrations: int) -> None:
    """A journal.db as a version that shipped only the first ``migrations`` made it."""
    home.mkdir(parents=True, exist_ok=True)
    db = connect(home / "journal.db")
    db["_migrations"].create({"name": str, "applied_at": str}, pk="name")
    for name, fn in MIGRATIONS[:migrations]:
        fn(db)
        db["_migrations"].insert({"name": name, "applied_at": "2025-01-01T00:00:00Z"})
    db.conn.close()


def test_an_older_journal_is_read_as_far_as_its_tables_go(home: Path) -> None:
    old_journal(home, 3)  # threads, summaries and the queue; no memory tables yet
    before = tree(home)
    with open_reader(home) as reader:
        assert reader.versions() == [] and reader.events() == [] and reader.folds() == []
        assert reader.pending() == [] and reader.status()["pending_changes"] == 0
    assert tree(home) == before


def test_a_read_an_older_journal_cannot_answer_names_the_step_that_migrates_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_journal(home, 4)  # memory_versions without the columns later versions added
    with pytest.raises(HomeError) as caught, open_reader(home) as reader:
        reader.version_sizes()  # sizes count the deltas a later version added
    message = str(caught.value)
    assert "older deerflow_nb" in message and "`deerflow-nb migrate`" in message
    assert "\n" not in message
    assert cli_main(["migrate", "--home", str(home)]) == 0  # the step the message names
    out = capsys.readouterr().out
    assert out.startswith(f"{home / 'journal.db'}: applied ") and MIGRATIONS[4][0] in out
    with open_reader(home) as reader:
        assert reader.version_sizes() == []
        assert reader.migrations() == sorted(name for name, _ in MIGRATIONS)
    assert cli_main(["migrate", "--home", str(home)]) == 0
    assert capsys.readouterr().out == f"{home / 'journal.db'}: up to date\n"


def test_migrate_without_a_journal_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(tmp_path)
    assert cli_main(["migrate", "--home", str(tmp_path)]) == 2
    assert "no journal at" in capsys.readouterr().err
    assert tree(tmp_path) == before


# -- on a read-only disk -----------------------------------------------------------------
READ = (
    "import json, sys\n"
    "from deerflow_nb.memory import open_reader\n"
    "from tests.test_memory_read_only import every_read\n"
    "with open_reader(sys.argv[1]) as reader:\n"
    "    print(json.dumps(every_read(reader), default=str))\n"
)


@pytest.fixture
def readable_copy(lived_in: Path) -> Iterator[Path]:
    """A copy of the home that another user may read (pytest's tmp folders are private)."""
    outer = Path(tempfile.mkdtemp(prefix="deerflow-ro-"))
    try:
        outer.chmod(0o755)
        copy = outer / "home"
        shutil.copytree(lived_in, copy)
        for path in [copy, *copy.rglob("*")]:  # memory.json is written 0600
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield copy
    finally:
        for path in [outer, *outer.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR | stat.S_IXUSR)
        shutil.rmtree(outer)


# uid 0 without a single capability (``setpriv``, util-linux): root's own files stay
# readable, anything else obeys its permission bits as for any user.
DROP_CAPABILITIES = [
    "setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
]  # fmt: skip
NOBODY = 65534


def run_reader(prefix: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("DEERFLOW_NB_HOME", None)
    return subprocess.run(
        [*prefix, sys.executable, "-c", READ, str(home)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def expected(home: Path) -> dict[str, Any]:
    with open_reader(home) as reader:
        seen = every_read(reader)
    return json.loads(json.dumps(seen, default=str))


def without_paths(seen: dict[str, Any]) -> dict[str, Any]:
    status = {k: v for k, v in seen["status"].items() if not k.endswith("_path")}
    return {**seen, "status": status}


@pytest.mark.skipif(os.geteuid() != 0, reason="a bind mount needs root (the next test runs)")
def test_reads_on_a_read_only_mount(readable_copy: Path) -> None:
    want = without_paths(expected(readable_copy))
    before = tree(readable_copy)
    mount = (
        f"mount --bind {readable_copy} {readable_copy} && "
        f"mount -o remount,ro,bind {readable_copy} {readable_copy} && "
        f'touch {readable_copy}/probe 2>/dev/null && exit 97; exec "$@"'
    )
    result = run_reader(["unshare", "-m", "sh", "-c", mount, "sh"], readable_copy)
    if result.returncode in (1, 32) and "mount" in result.stderr:
        pytest.skip(f"no mount namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert without_paths(json.loads(result.stdout)) == want
    assert tree(readable_copy) == before


def test_reads_in_a_folder_the_reader_cannot_write(readable_copy: Path) -> None:
    """Every read, by a process the permission bits forbid to write the home.

    As root, which writes anywhere through its capabilities, the reader keeps uid 0 but
    runs with none: none effective, permitted, inheritable or ambient, and none in its
    bounding set, so executing Python gives it none back. The copy belongs to another user
    (65534), so the reader is neither privileged nor the copy's owner (it may not chmod it
    back). Keeping uid 0 lets it import the package and its virtualenv wherever the clone
    lives: dropping to uid 65534 instead failed in a clone inside a 0700 folder, which
    that user cannot enter. Not as root, the reader is the copy's owner, its write bits
    removed. Either way the reader's own process first tries to create a file in the home
    and must fail, and the tree (names, bytes and modes) is compared afterwards."""
    want = without_paths(expected(readable_copy))
    for path in [readable_copy, *readable_copy.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    prefix: list[str] = []
    if os.geteuid() == 0:  # root writes anywhere: read with no capability instead
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop capabilities")
        for path in [readable_copy, *readable_copy.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        prefix = DROP_CAPABILITIES
    before = tree(readable_copy)
    probe = f"touch {shlex.quote(str(readable_copy / 'probe'))} 2>/dev/null && exit 97; "
    result = run_reader([*prefix, "sh", "-c", probe + 'exec "$@"', "sh"], readable_copy)
    assert result.returncode != 97, "the reader could create a file in the home"
    assert result.returncode == 0, result.stderr
    assert without_paths(json.loads(result.stdout)) == want
    assert tree(readable_copy) == before


def test_a_readers_embedder_reads_the_vector_cache_and_writes_nothing(home: Path) -> None:
    (home / "config.yaml").write_text("memory:\n  embeddings: openai:text-embedding-3-small\n")
    with Memory(home) as mem:  # the writer caches the facts' vectors at fold time
        mem.add_fact("Prefers polars over pandas", "preference")
        mem.add_fact("Works on churn models", "context")
        cached = mem.embedder.model_id
    before = tree(home)
    with open_reader(home) as reader:
        embedder = reader.embedder()
    assert embedder.model_id == cached
    embedder.embed_many(["Prefers polars over pandas", "Works on churn models"])
    assert embedder.computed == 0  # both read back from the journal, read-only
    embedder.embed_many(["Uses duckdb at work"])
    assert embedder.computed == 1  # a new text is computed, and kept in memory only
    assert tree(home) == before
