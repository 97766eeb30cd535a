"""What the inspector shows of a home, read through memory's one read door.

The inspector runs in its own process next to a live kernel, so it only ever reads, and
only through ``MemoryReader`` (``memory.open_reader``): memory.json (replaced by atomic
rename, so a read sees a whole old or a whole new file) and journal.db opened read-only.
Reading writes nothing at all: a missing home stays missing, a damaged memory.json is not
copied, no ``-wal`` is made; recall's index, when it lags, is caught up in memory, and the
embedding cache is only read (``embedder_for``). Every function returns plain lists and dicts;
``view_models`` shapes them for tables and charts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config import CONFIG_FILENAME, JOURNAL_FILENAME, MEMORY_FILENAME
from ..config import HomeError as HomeError
from ..memory import MemoryFileError as MemoryFileError
from ..memory import MemoryReader, Scope, open_reader
from ..memory import fold_summary as fold_summary
from ..schema.constants import CATEGORIES as CATEGORIES
from .view_models import EXCERPT_CHARS, short


def paths(home: Path) -> dict[str, Path]:
    """Where each file of a home lives (whether or not it exists yet)."""
    return {
        "home": home,
        "memory": home / MEMORY_FILENAME,
        "journal": home / JOURNAL_FILENAME,
        "config": home / CONFIG_FILENAME,
    }


def home_is_empty(home: Path) -> bool:
    """True when there is nothing to show: no memory.json and no journal."""
    return not (home / MEMORY_FILENAME).exists() and not (home / JOURNAL_FILENAME).exists()


# -- memory.json -------------------------------------------------------------------------
def load_memory(reader: MemoryReader) -> dict[str, Any] | None:
    """memory.json as a dict, None when absent; ``MemoryFileError`` when it is damaged
    (the same check as the kernel's, but no copy is written: reading changes nothing)."""
    return reader.data if reader.store.path.exists() else None


def set_aside_copies(home: Path) -> list[Path]:
    """Copies of memory.json kept beside it (for example a damaged file moved out of the way)."""
    return sorted(p for p in home.glob(f"{MEMORY_FILENAME}.corrupt-*") if p.is_file())


def embedder_for(home: Path) -> Any:
    """The embedder the kernel ranks with (``memory.embeddings``), or None when unset.

    It reads the journal's embedding cache read-only (``MemoryReader.embedder``), so facts
    embedded at fold time are not computed again here; only the preview's context is.
    """
    with open_reader(home, journal=False) as reader:
        return reader.embedder()


def recall(home: Path, query: str, k: int, embedder: Any = None) -> list[dict[str, Any]]:
    """Journaled messages of lead threads matching ``query``, best first, every project's
    (``MemoryReader.recall``: read-only, the index caught up in memory if it lags)."""
    with open_reader(home) as reader:
        return reader.recall(query, k, embedder=embedder)


def injection(
    home: Path,
    context: str | None,
    max_tokens: int,
    *,
    project: str | None = None,
    embedder: Any = None,
) -> tuple[str, list[dict[str, Any]], int]:
    """The block a turn in ``project`` (None: outside any project) injects for ``context``,
    why each fact is in it, and how many facts the turn's scope sees
    (``MemoryReader.explain``: the turn's own ranking, memory.json only read)."""
    with open_reader(home, journal=False) as reader:
        return reader.explain(context, max_tokens, project=project, embedder=embedder)


# -- journal.db --------------------------------------------------------------------------
@contextmanager
def open_home(home: Path, *, journal: bool = True) -> Iterator[MemoryReader]:
    """The home read-only (``memory.open_reader``); ``HomeError`` when SQLite cannot read
    the journal (``journal=False`` then reads memory.json alone)."""
    with open_reader(home, journal=journal) as reader:
        yield reader


def events(reader: MemoryReader, scope: Scope | None = None) -> list[dict[str, Any]]:
    """The memory_events rows ``scope`` sees (default: every project's), oldest first, each
    naming its project."""
    return reader.event_rows(scope=scope or Scope.everywhere())


def size_series(reader: MemoryReader) -> list[dict[str, Any]]:
    """Memory size after each saved version: fact count and bytes of memory.json."""
    return [
        {
            "ts": v["created_at"],
            "version": v["id"],
            "facts": v.get("fact_count") or 0,
            "kilobytes": round((v.get("chars") or 0) / 1024, 2),
            "reason": v.get("reason") or "",
        }
        # the sizes without loading every snapshot (this runs on each auto-refresh)
        for v in reader.version_sizes()
    ]


def thread_tree(reader: MemoryReader) -> list[dict[str, Any]]:
    """Lead threads, newest first, each with its sub-agent threads nested under ``children``.

    Every thread carries its turns (token usage per turn), its summaries, and message
    counts; a sub-agent whose parent is not journaled is listed at the top level.
    """
    threads = reader.threads()
    if not threads:
        return []
    turns: dict[str, list[dict[str, Any]]] = {}
    for t in reader.turns():
        turns.setdefault(t["thread_id"], []).append(
            {
                "turn": t["id"],
                "started": t.get("started_at") or "",
                "status": t.get("status") or "",
                "model": t.get("model") or "",
                "input_tokens": t.get("input_tokens") or 0,
                "output_tokens": t.get("output_tokens") or 0,
                "facts_injected": t.get("facts_injected") or 0,
            }
        )
    summaries: dict[str, list[dict[str, Any]]] = {}
    for s in reader.summaries():
        summaries.setdefault(s["thread_id"], []).append(
            {
                "covers_until_seq": s["covers_until_seq"],
                "content": s.get("content") or "",
                "tokens": s.get("tokens") or 0,
                "created_at": s.get("created_at") or "",
            }
        )
    counts = reader.message_totals()
    nodes = {}
    for t in threads:
        messages, message_tokens = counts.get(t["id"], (0, 0))
        thread_turns = turns.get(t["id"], [])
        nodes[t["id"]] = {
            "id": t["id"],
            "kind": t.get("kind") or "lead",
            "parent_id": t.get("parent_id"),
            "title": t.get("title") or t["id"],
            "model": t.get("model") or "",
            "created_at": t.get("created_at") or "",
            "updated_at": t.get("updated_at") or "",
            "messages": messages,
            "message_tokens": message_tokens,
            "turns": thread_turns,
            "input_tokens": sum(x["input_tokens"] for x in thread_turns),
            "output_tokens": sum(x["output_tokens"] for x in thread_turns),
            "summaries": summaries.get(t["id"], []),
            "children": [],
        }
    roots = []
    for node in nodes.values():
        parent = nodes.get(node["parent_id"] or "")
        if parent is not None and parent is not node:
            parent["children"].append(node)
        else:
            roots.append(node)
    # Newest first; threads touched within one clock tick: the later-created first.
    position = {id(node): i for i, node in enumerate(roots)}
    roots.sort(key=lambda n: (n["updated_at"], position[id(n)]), reverse=True)
    return roots


def thread_messages(reader: MemoryReader, thread_id: str) -> list[dict[str, Any]]:
    """One thread's messages, oldest first, for the transcript view (a tool call is shown
    by its name and arguments when the message has no text)."""
    return [
        {
            "seq": m["seq"],
            "time": m.get("created_at") or "",
            "role": m["role"],
            "content": m.get("content") or _tool_calls_text(m.get("tool_calls")),
            "tokens": m.get("tokens") or 0,
        }
        for m in reader.message_rows(thread_id)
    ]


def turn_rows(reader: MemoryReader, thread: dict[str, Any]) -> list[dict[str, Any]]:
    """A thread's turns (``thread_tree``'s node), oldest first, each with the words of its
    user message and of its final reply instead of the turn's id."""
    said: dict[str, dict[str, str]] = {}
    for m in reader.turn_texts(thread["id"]):
        texts = said.setdefault(m["turn_id"], {})
        if m["role"] == "user":
            texts.setdefault("message", m["content"])
        else:
            texts["reply"] = m["content"]  # the last one: the turn's answer
    return [
        {
            "started": t["started"],
            "message": short(said.get(t["turn"], {}).get("message", ""), EXCERPT_CHARS),
            "reply": short(said.get(t["turn"], {}).get("reply", ""), EXCERPT_CHARS),
            "status": t["status"],
            "input_tokens": t["input_tokens"],
            "output_tokens": t["output_tokens"],
            "facts_injected": t["facts_injected"],
        }
        for t in thread["turns"]
    ]


def _tool_calls_text(raw: Any) -> str:
    """``name(arguments)`` for each call of a stored ``tool_calls`` JSON list."""
    import json

    if not raw:
        return ""
    try:
        calls = json.loads(raw)
        return "; ".join(
            f"{c['function']['name']}({c['function'].get('arguments') or ''})" for c in calls
        )
    except (ValueError, TypeError, KeyError):
        return str(raw)


def pending_changes(reader: MemoryReader) -> list[dict[str, Any]]:
    """The changes waiting for review (``Memory.pending()``), oldest first, each with
    ``items``: every fact it adds, removes or merges and every section it rewrites,
    numbered and in full (``Memory.review.items``); facts as memory.json has them, or none
    when it cannot be read."""
    try:
        facts = reader.data.get("facts", [])
    except MemoryFileError:
        facts = []
    return [
        {
            "id": change["id"],
            "source": change.get("source") or "",
            "created_at": change.get("created_at") or "",
            "items": [i.to_dict() for i in reader.review_items(change, facts)],
        }
        for change in reader.pending()
    ]


def fold_reports(reader: MemoryReader, limit: int = 10) -> dict[str, Any]:
    """What the latest folds did (newest first; a held one says what became of its change)
    and how many failed in a row since the memory model last answered with a diff."""
    return {"recent": reader.folds(limit), "consecutive_failures": reader.consecutive_failures()}


def fold_rows(recent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Recent fold reports as table rows: when, thread, outcome, version, what it did."""
    return [
        {
            "time": f.get("at") or "",
            "thread": f.get("source") or "",
            "outcome": f.get("outcome") or "",
            "version": f.get("version"),
            "what it did": fold_summary(f, with_head=False),
        }
        for f in recent
    ]


def versions(reader: MemoryReader) -> list[dict[str, Any]]:
    """Saved memory versions, newest first, without their snapshots."""
    return list(reversed(reader.versions()))


def status(home: Path, reader: MemoryReader, now: float | None = None) -> dict[str, Any]:
    """Pending folds (and which one a kernel is folding now), the last fold, the last
    error, and where every file is (the journal's size with its write-ahead log, where a
    running kernel's recent writes are)."""
    queue = [
        {
            "thread_id": q["thread_id"],
            "status": q.get("status") or "",
            "folding_now": q["folding_now"],
            "claimed_by": q.get("claimed_by") or "",
            "attempts": q.get("attempts") or 0,
            "enqueued_at": q.get("enqueued_at") or "",
            "last_error": q.get("last_error") or "",
        }
        for q in reader.queue(now)
    ]
    f = reader.last_fold_version()
    last_fold = None
    if f is not None:
        last_fold = {"version": f["id"], "at": f["created_at"], "source": f.get("source") or ""}
    errors = [q for q in queue if q["last_error"]]
    files = []
    named = [*paths(home).items(), *(("damaged copy", p) for p in set_aside_copies(home))]
    for name, path in named:
        exists = path.exists()
        size = path.stat().st_size if exists and path.is_file() else None
        wal = path.with_name(path.name + "-wal")
        if size is not None and name == "journal" and wal.is_file():
            size += wal.stat().st_size  # WAL mode: recent writes live in journal.db-wal
        files.append({"file": name, "path": str(path), "exists": exists, "bytes": size})
    return {
        "pending": sum(q["status"] == "pending" for q in queue),
        "failed": sum(q["status"] == "failed" for q in queue),
        "folding_now": sum(q["folding_now"] for q in queue),
        "queue": queue,
        "last_error": errors[-1] if errors else None,
        "last_fold": last_fold,
        "awaiting_review": reader.pending_count(),
        "files": files,
    }
