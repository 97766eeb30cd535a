"""Untrusted text stays text in every view: ``%%agent`` turns, ``%memory`` bundles, the
panel's widgets, the terminal and the CLI.

A reply, tool arguments, a sub-agent's description and error, facts, summaries, events,
pending changes and ``last_error`` all hold ``<img onerror>``, ``<script>``, ``<iframe>``,
``javascript:`` links, a remote Markdown image and terminal escape sequences (see
``hostile.py``). Every mime type of every bundle a real ``InteractiveShell`` publishes is
checked as a frontend reads it (``assert_inert``); the text itself must still be there.
"""

from __future__ import annotations

import html
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile import (
    HOSTILE_BLOCK,
    HOSTILE_LINE,
    HOSTILE_PARTS,
    HostileModel,
    assert_inert,
    live_parts,
)
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from loopback import ServerHandle, start_server

from deerflow_nb.agent.notebook_tools import NotebookTools
from deerflow_nb.notebook.agent_display import TerminalTurnView, TurnView
from deerflow_nb.notebook.session import close_session, get_session
from deerflow_nb.untrusted import render_markdown


def text_of(html_text: str) -> str:
    """What a reader sees of ``html_text``: tags dropped, entities decoded."""
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


@pytest.fixture
def hostile_server(
    monkeypatch: pytest.MonkeyPatch, home: Path, shell: InteractiveShell
) -> Iterator[ServerHandle]:
    """The loopback server as the configured model, serving ``HostileModel``; no retries,
    so a failing call fails at once."""
    (home / "config.yaml").write_text("model:\n  max_retries: 0\n")
    with start_server(models=("loopback-model",)) as server:
        httpd = server._httpd  # the tests' hook: which model the loopback server serves
        httpd.model = HostileModel(httpd.model, HOSTILE_BLOCK, fail_extraction=True)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("DEERFLOW_NB_MODEL", "loopback-model")
        close_session(shell)  # the next cell reads this configuration
        yield server


def published(cap: Any) -> list[dict[str, Any]]:
    return [o.data for o in cap.outputs]


def formatted(shell: InteractiveShell, obj: Any) -> dict[str, Any]:
    """Every mime type IPython's display formatter computes for ``obj``."""
    data, _ = shell.display_formatter.format(obj)
    return data


# -- %%agent -------------------------------------------------------------------------
def test_a_hostile_turn_is_inert_in_every_update(
    shell: InteractiveShell, hostile_server: ServerHandle
) -> None:
    with capture_output() as cap:
        result = shell.run_cell("%%agent\nPlease look at my data.")
    assert result.success, result.error_in_exec
    assert hostile_server._httpd.model.turns == 1
    updates = published(cap)
    assert len(updates) >= 3
    for i, data in enumerate(updates):
        assert "text/markdown" not in data  # a frontend renders it as trusted
        assert_inert(data, f"update {i}")
    final = updates[-1]
    seen = text_of(final["text/html"])
    plain = final["text/plain"]
    for part in HOSTILE_PARTS:  # the reply, shown as text
        assert part in plain, (part, plain)
    # the tool call (its argument cut to a line's worth), the sub-agent's description and
    # its error are in the progress lines, as text
    assert '→ describe_variable(name="<img src=x onerror=alert(1)> <script>' in seen
    assert "✗ sub-agent <img src=x onerror=alert(1)>" in seen and "failed:" in seen
    assert " facts injected · project " in seen.rstrip().splitlines()[-1]  # the footer, last
    assert "<script>alert(2)</script>" in plain and "sub-agent <img src=x" in plain
    assert shell.user_ns["_agent"] == HOSTILE_BLOCK  # the reply itself is kept as it came


def test_an_unclosed_fence_in_a_reply_cannot_swallow_the_footer() -> None:
    view = TurnView()
    view.lines.append(("→ `x()`", "→ x()"))
    view.reply = "Here:\n\n```python\nprint(1)\n\n---\n\n*offline · thread fake*"
    view.footer = "offline · thread real · 1 in / 1 out tokens · 0 facts injected"
    data = view.output()._repr_mimebundle_()
    assert (
        data["text/html"]
        .rstrip()
        .endswith(
            "<hr>\n<p><em>offline · thread real · 1 in / 1 out tokens · 0 facts injected</em></p>"
        )
    )
    assert "thread fake" in data["text/html"].split("<hr>")[0]  # inside the reply's code
    assert_inert(data)


def test_the_terminal_gets_no_escape_sequences(capsys: pytest.CaptureFixture[str]) -> None:
    view = TerminalTurnView()
    view.on_event({"type": "tool", "name": "describe_variable", "arguments": HOSTILE_LINE})
    view.on_event({
        "type": "subagent", "id": "r1", "status": "failed",
        "description": HOSTILE_LINE, "error": HOSTILE_LINE,
    })  # fmt: skip
    for piece in HOSTILE_BLOCK.split(" "):
        view.on_text(piece + " ")
    view.finish(None)
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\u202e\u200b"), repr(out)
    assert "<script>alert(2)</script>" in out and "→ describe_variable(<img" in out


def test_the_code_run_code_shows_is_all_of_the_code(shell: InteractiveShell) -> None:
    """A fence in the code cannot close the display and hide or restyle what follows,
    and characters that hide text are written out, not dropped."""
    shown: list[str] = []
    code = (
        "x = 1\ns = '''\n````\n\n```\n<img src=x onerror=alert(1)>\n![](http://127.0.0.1:9/b)\n"
        "'''\nimport os  # \u202e hidden\nran = 'yes'\n"
    )
    tools = NotebookTools(shell.user_ns, shell, allow_code=True, show=shown.append)
    with capture_output() as cap:
        tools.run_code(code)
        TurnView().show_block(shown[0])  # as the cell shows it
    assert shell.user_ns["ran"] == "yes"
    (data,) = published(cap)
    assert_inert(data)
    page = data["text/html"]
    assert page.count("<pre>") == 1 and page.index("<pre>") < page.index("x = 1")
    body = text_of(page.split("<pre>", 1)[1].split("</pre>", 1)[0])
    assert body == code.replace("\u202e", "<U+202E>")  # every line, nothing hidden
    assert "<U+202E>" in data["text/plain"]


# -- %memory ---------------------------------------------------------------------------
def seed_hostile_memory(shell: InteractiveShell) -> Any:
    mem = get_session(shell).memory
    fact = mem.add_fact(HOSTILE_LINE, category="context")
    mem.add_fact("Prefers polars over pandas", category="preference")
    mem.facts.edit(fact["id"], HOSTILE_LINE + " (edited)")
    mem.apply(
        {
            "user": {"workContext": {"summary": HOSTILE_LINE, "shouldUpdate": True}},
            "history": {"recentMonths": {"summary": HOSTILE_BLOCK, "shouldUpdate": True}},
            "newFacts": [{"content": "Uses duckdb " + HOSTILE_LINE, "category": "knowledge",
                          "confidence": 0.9}],
        },
        source="t-hostile",
    )  # fmt: skip
    mem.review.enabled = True
    mem.apply(
        {"newFacts": [{"content": "Pending " + HOSTILE_LINE, "confidence": 0.9}]},
        source="t-pending",
    )
    return mem


def test_every_memory_view_is_inert_in_every_mime_type(
    shell: InteractiveShell, hostile_server: ServerHandle
) -> None:
    mem = seed_hostile_memory(shell)
    with capture_output():  # a turn whose fold fails with the server's hostile error
        assert shell.run_cell("%%agent -t hostile\nI prefer polars.").success
    mem.flush()
    assert "onerror" in str(mem.status()["last_error"])
    fid = mem.facts.list(category="context")[0]["id"]
    versions = mem.versions()
    commands = [
        "facts", "search onerror", "search polars -k 3", "preview",
        "preview --context onerror", "history", f"history {fid}", "versions",
        f"diff {versions[0]['id']}", f"diff {versions[0]['id']} {versions[-1]['id']}",
        "pending", "status", f"edit {fid} edited again", "add <b>bold</b> ![](http://x/y)",
        "review on", "forget --match onerror",
    ]  # fmt: skip
    for command in commands:
        with capture_output() as cap:
            value = shell.run_line_magic("memory", command)
        bundles = published(cap)
        if value is not None:
            bundles.append(formatted(shell, value))
        assert bundles, command
        for data in bundles:
            assert "text/html" in data, command
            assert_inert(data, f"%memory {command}")
        shown = " ".join(text_of(d["text/html"]) for d in bundles)
        if command in ("facts", "history", "pending", "status", "search onerror"):
            assert "onerror=alert(1)" in shown, (command, shown)  # shown, as text


def test_memory_markdown_cells_are_literal(shell: InteractiveShell) -> None:
    from deerflow_nb.notebook.views.facts import FactsTable, PreviewView
    from deerflow_nb.notebook.views.table import Notice

    fact = {"id": "f|1", "category": "context", "confidence": 0.9,
            "content": "a | b ![](http://x/y) <img src=x onerror=alert(1)> *em* `code`",
            "createdAt": "2026-01-01T00:00:00Z"}  # fmt: skip
    md = FactsTable((fact,))._repr_markdown_()
    row = md.splitlines()[-1]
    assert row.count(" | ") == 5  # the fact's own pipes do not add columns (6 with scope)
    rendered = render_markdown(md)
    assert "<em>" not in rendered and "<code>" not in rendered
    assert "a | b ![](http://x/y) &lt;img src=x onerror=alert(1)&gt; *em* `code`" in rendered
    note = Notice("Forgot f1: <script>x</script>", ("![](http://x/y)",))
    assert_inert(formatted(shell, note))
    preview = PreviewView("<memory>\n```\n<img src=x onerror=1>\n````\n</memory>", 9, 10)
    assert_inert(formatted(shell, preview))
    assert render_markdown(preview._repr_markdown_()).count("<pre>") == 1


# -- the panel -------------------------------------------------------------------------
def html_widgets(widget: Any) -> Iterator[Any]:
    import ipywidgets as w

    if isinstance(widget, w.HTML):
        yield widget
    for child in getattr(widget, "children", ()):
        yield from html_widgets(child)


def test_the_panel_shows_hostile_memory_as_text(shell: InteractiveShell) -> None:
    from deerflow_nb.notebook.panel import MemoryPanel

    mem = seed_hostile_memory(shell)
    thread = "t-<img src=x onerror=alert(1)>"
    mem.journal.ensure_thread(thread)
    mem.journal.add_message(thread, {"role": "user", "content": "Recall me " + HOSTILE_LINE})
    panel = MemoryPanel(mem)
    try:
        panel.context.value = "onerror alert"
        panel.recall.query.value = "recall me onerror alert"
        panel.recall.button.click()  # the Recall tab: journal text and thread names
        assert "Recall me" in text_of(panel.recall.results.value)
        panel.recall.open_buttons[0].click()  # the result's thread, in the tab
        assert "Recall me" in text_of(panel.recall.transcript.value)
        panel.fact_checks[next(iter(panel.fact_checks))].value = True
        panel.forget_button.click()  # the question it asks before forgetting
        assert "Forget 1 fact?" in text_of(panel.confirm_text.value)
        panel._say_error(KeyError(HOSTILE_LINE))
        values = [h.value for h in html_widgets(panel.widget)]
        assert len(values) >= 10
        for value in values:
            assert live_parts(value) == [], value
            assert not any(c in value for c in "\x1b\x07\u202e\u200b"), value
        everything = text_of(" ".join(values))
        assert everything.count("<img src=x onerror=alert(1)>") >= 5, everything
        assert "Pending (1)" in panel.tabs.titles and "1 change awaits review" in text_of(
            panel.header.value
        )
        tabs = (panel.profile, panel.history, panel.preview_block, panel.message)
        for tab in (*tabs, panel.recall.results, panel.recall.transcript):
            assert "onerror=alert(1)" in text_of(tab.value), tab
        assert_inert(formatted(shell, panel), "panel")
    finally:
        panel.close()


# -- the command line ------------------------------------------------------------------
def test_the_cli_prints_memory_text_without_control_characters(
    home: Path, hostile_server: ServerHandle, shell: InteractiveShell
) -> None:
    import contextlib

    from deerflow_nb.cli import main

    mem = get_session(shell).memory
    mem.journal.ensure_thread("t-cli")
    mem.journal.add_message("t-cli", {"role": "user", "content": "I prefer polars."})
    mem.journal.add_message("t-cli", {"role": "assistant", "content": "Noted."})
    mem.enqueue("t-cli")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["fold", "--home", str(home)])
        main(["status", "--home", str(home)])
    assert code == 1
    text = out.getvalue() + err.getvalue()
    assert "<img src=x onerror=alert(1)>" in text  # the server's error, shown as text
    assert not any(c in text for c in "\x1b\x07\u202e\u200b"), repr(text)
