"""The MCP SDK's own client driving ``deerflow-nb mcp`` over stdio and streamable HTTP.

Works with whichever ``mcp`` major is importable, so ``tests/test_mcp_server.py`` runs the
same scenario under 2.x in the test process and under 1.x in a subprocess whose
PYTHONPATH puts a separate ``mcp<2`` install first; run as a script it plays the scenario
and prints what it saw as JSON (``benchmarks/mcp_search.py`` times ``search_memory`` through it).

    python tests/mcp_client.py stdio|http [--project NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio

CONVERSATION = [
    {"role": "user", "content": "I prefer polars over pandas for data wrangling."},
    {"role": "assistant", "content": "Noted: polars it is."},
]
REMEMBER_CALLS = 300


def server_command(*args: str) -> list[str]:
    """``deerflow-nb mcp ARGS`` from this interpreter's environment."""
    script = Path(sys.executable).with_name("deerflow-nb")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "deerflow_nb.cli"]
    return [*base, "mcp", *args]


@asynccontextmanager
async def stdio_session(*args: str, cwd: str | None = None) -> AsyncIterator[Any]:
    """An initialized client session with a ``deerflow-nb mcp ARGS`` it started (this
    process's environment, DEERFLOW_NB_HOME included, passed on whole)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    command = server_command(*args)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env=dict(os.environ), cwd=cwd
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


@contextmanager
def http_server(*args: str) -> Iterator[tuple[str, str]]:
    """``deerflow-nb mcp --http ARGS`` running: its URL and the token it printed."""
    proc = subprocess.Popen(
        server_command("--http", *args), stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        token = proc.stdout.readline().split()[-1]
        yield url, token
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[Any]:
    """An initialized client session over streamable HTTP, sending the bearer token."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


async def call(session: Any, name: str, **arguments: Any) -> tuple[str, bool]:
    """A tool's text and whether it is an error (1.x names it ``isError``, 2.x ``is_error``)."""
    result = await session.call_tool(name, arguments)
    dumped = result.model_dump(by_alias=True)
    return result.content[0].text, bool(dumped.get("isError"))


async def scenario(session: Any) -> dict[str, Any]:
    """Every tool and resource once (``remember`` 300 times), as the client saw them."""
    seen: dict[str, Any] = {}
    seen["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
    seen["search"] = await call(session, "search_memory", query="churn model holdout split")
    seen["off_topic"] = await call(session, "search_memory", query="quantum chromodynamics")
    seen["hostile"] = await call(session, "search_memory", query="onerror image hidden orders")
    seen["in_beta"] = await call(session, "search_memory", query="churn model", project="beta")
    remembered = [
        await call(session, "remember", content=f"Note {i}: the churn data has {i} rows")
        for i in range(REMEMBER_CALLS)
    ]
    seen["remembered"] = [text for text, error in remembered if not error]
    seen["remember_errors"] = sorted({text for text, error in remembered if error})
    seen["list"] = await call(session, "list_facts")
    model_fact = seen["remembered"][0].split()[1]  # "Remembered: fact_x | ..."
    seen["forget"] = await call(session, "forget", fact_id=model_fact)
    seen["forget_beta"] = await call(session, "forget", fact_id="fact_beta_seed")
    seen["add_messages"] = await call(
        session, "add_messages", thread="ide-chat", messages=CONVERSATION
    )
    seen["recall"] = await call(session, "recall", query="polars wrangling")
    resources = (await session.list_resources()).resources
    seen["resources"] = [str(r.uri) for r in resources]
    seen["read"] = [(await session.read_resource(r.uri)).contents[0].text for r in resources]
    return seen


async def _main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=("stdio", "http"))
    parser.add_argument("--project", default="alpha")
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        async with stdio_session("--project", args.project) as session:
            seen = await scenario(session)
    else:
        with http_server("--project", args.project) as (url, token):
            async with http_session(url, token) as session:
                seen = await scenario(session)
    print(json.dumps(seen))


if __name__ == "__main__":
    anyio.run(_main, sys.argv[1:])
