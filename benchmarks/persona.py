"""How soon the DeerFlow persona's reply starts streaming in JupyterLab's chat panel.

Usage::

    python benchmarks/persona.py [--asks N] [--facts N] [--quick] [--results DIR | --no-results]

A real ``jupyter server`` with the persona manager (``tests/chat_server.py``) serves a
temporary root on a home holding ``--facts`` facts (1,000; the offline model, no key). A
client speaking the chat panel's WebSocket opens ``churn/bench.chat``, waits for the
persona to join (which opens the home's memory in the background, as a chat opening does),
and ``--wait`` seconds later (3: the user types) sends ``--asks`` messages one after
another (10). Each figure is the
time from the client sending a message to the first frame carrying a chunk of the
persona's reply: measured at the client, so it includes the WebSocket both ways on
loopback and the chat's own bookkeeping, an upper bound of the time after the message
arrives at the server. The first message is the cold row (the server's first turn); the
later ones are the warm rows. Goal: first chunk within 0.5 s, warm p50 and
cold alike. The figures also go to ``benchmarks/results/persona.json``. ``--quick``: 100
facts, three messages. Needs ``jupyter-ai-persona-manager`` (the ``jupyter-ai`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from benchlib import Results, add_results_options, report_written, results_dir  # noqa: E402
from first_turn import TOPICS, seed_home  # noqa: E402

GOAL_S = 0.5


async def measure(server: object, asks: int, wait: float) -> list[tuple[float, float, int]]:
    """(first chunk s, whole reply s, frames) of each of ``asks`` messages, in order, the
    first ``wait`` seconds after the persona joined the chat."""
    from chat_server import ChatClient

    client = ChatClient(server, "churn/bench.chat")  # type: ignore[arg-type]
    await client.open()
    await asyncio.sleep(wait)  # the user types the first message
    try:
        rows = []
        for i in range(asks):
            reply = await client.ask(f"What do you know about my {TOPICS[i % len(TOPICS)]}?")
            rows.append((reply.first_chunk_s, reply.done_s, reply.frames))
        return rows
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, help="messages sent (10; --quick: 3)")
    parser.add_argument("--facts", type=int, help="facts in the home (1,000; --quick: 100)")
    parser.add_argument(
        "--wait", type=float, help="seconds from the chat opening to the first message (3)"
    )
    add_results_options(parser)
    args = parser.parse_args(argv)
    args.asks = max(2, args.asks or (3 if args.quick else 10))
    args.facts = args.facts or (100 if args.quick else 1000)
    args.wait = 3.0 if args.wait is None else args.wait
    try:
        import jupyter_ai_persona_manager  # noqa: F401
    except ImportError:
        print("needs jupyter-ai-persona-manager: pip install 'deerflow-nb[jupyter-ai]'")
        return 1
    from chat_server import start_server

    results = Results(
        "persona",
        about="DeerFlow persona: first streamed chunk of a reply in the chat panel (WebSocket)",
        goals={"first_chunk_max_s": GOAL_S},
        options={
            "asks": args.asks,
            "facts": args.facts,
            "wait_s": args.wait,
            "measured_at": "chat WebSocket client",
        },
    )
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "root" / "churn").mkdir(parents=True)
        (tmp / "home").mkdir()
        seed_home(tmp / "home", None, args.facts)
        server = start_server(tmp, tmp / "root", tmp / "home")
        try:
            rows = asyncio.run(measure(server, args.asks, args.wait))
        finally:
            server.stop()
    cold, warm = rows[0], rows[1:]
    warm_first = [r[0] for r in warm]
    p50 = statistics.median(warm_first)
    worst = max(warm_first)
    verdict = "meets" if max(p50, cold[0]) <= GOAL_S else "misses"
    print(f"DeerFlow persona, offline model, {args.facts:,} facts, {args.asks} messages")
    print("(time from sending to the reply's first chunk, at the chat WebSocket client)")
    print(f"  cold (first turn): first chunk {cold[0]:.3f} s, whole reply {cold[1]:.3f} s")
    print(
        f"  warm: first chunk p50 {p50:.3f} s, max {worst:.3f} s; whole reply p50 "
        f"{statistics.median(r[1] for r in warm):.3f} s"
    )
    print(f"  goal: first chunk <= {GOAL_S} s: {verdict}")
    results.add(
        "first_chunk",
        cold_s=cold[0],
        cold_reply_s=cold[1],
        warm_p50_s=p50,
        warm_max_s=worst,
        warm_reply_p50_s=statistics.median(r[1] for r in warm),
        frames_per_reply=statistics.median(r[2] for r in rows),
    )
    report_written(results.write(results_dir(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
