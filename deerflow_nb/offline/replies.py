"""The offline model's reply texts: summaries, tool-result answers, sub-agent reports.

Plain answers quote the remembered facts a question shares words with.

Every reply starts with ``PREFIX``: the model says what it is.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

from ..similarity import overlap
from ..tokens import count_tokens, truncate_to_tokens
from ..untrusted import escape_markdown
from .extractor import forget_requests
from .routing import unknown_variable
from .words import content_words, first_sentence, key_terms, message_text

PREFIX = "(offline model) "
SUMMARY_MAX_TOKENS = 300
TOOL_RESULT_MAX_TOKENS = 600  # a 10-column DataFrame head with its dtypes fits whole
SUMMARY_TAG = "<conversation_to_summarize>"
_MEMORY_RE = re.compile(r"<memory>(.*?)</memory>", re.DOTALL)
# A fact line of the block: ``- text``, or a date with the one fact of its group
# (``1 Mar 2026: text``, ``Undated: text``), either with an optional ``[tag]`` first.
_FACT_RE = re.compile(
    r"^(?:-\s*|(?:\d{1,2} [A-Z][a-z]{2}(?: \d{4})?|[\d-]{5,10}|Undated):\s+)"
    r"(?:\[[^\]]*\]\s*)?(?:\([^)]*\)\s*)?(.+)$"
)
_ROLE_RE = re.compile(r"^(User|Assistant|Human|AI|Tool result)\s*:", re.MULTILINE | re.IGNORECASE)
_SUMMARY_HEAD = "Summary of earlier conversation:\n"
_BULLET_SAID = "- The user said: "


def summary(text: str) -> str:
    """One bullet per user turn (its first sentence), oldest dropped first to fit the budget.

    Bullets of a previous summary quoted in the conversation are carried over, so
    summarizing twice does not forget what the first summary kept.
    """
    body = text.split(SUMMARY_TAG, 1)[1].split("</conversation_to_summarize>", 1)[0]
    blocks = _ROLE_RE.split(body)
    carried = [line.strip() for line in blocks[0].splitlines() if _BULLET_SAID in line]
    carried = [line[line.index(_BULLET_SAID) :] for line in carried]
    said = [
        f"{_BULLET_SAID}{first_sentence(blocks[i + 1])}"
        for i in range(1, len(blocks) - 1, 2)
        if blocks[i].lower() in ("user", "human") and blocks[i + 1].strip()
    ]
    if not said and not carried:
        said = [f"{_BULLET_SAID}{first_sentence(ln)}" for ln in body.splitlines() if ln.strip()]
    bullets = carried + said or ["- (nothing to summarize)"]
    while (
        len(bullets) > 1 and count_tokens(_SUMMARY_HEAD + "\n".join(bullets)) > SUMMARY_MAX_TOKENS
    ):
        bullets.pop(0)
    return truncate_to_tokens(_SUMMARY_HEAD + "\n".join(bullets), SUMMARY_MAX_TOKENS)


def answer_from_tools(messages: list[dict[str, Any]]) -> str:
    """Restate the trailing tool results, each truncated, naming the tool that produced it
    (a sub-agent by its task's description; its report loses its own offline-model mark),
    each one list item: a one-line result inline, a longer one (a DataFrame's dtypes and
    head, a report) as a fenced code block under its item, so Markdown keeps its lines."""
    results = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(message)
    results.reverse()
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = _result_label(call["function"])
    lines = [f"{PREFIX}Here is what the tools returned:"]
    for message in results:
        name = names.get(str(message.get("tool_call_id")), message.get("name") or "tool")
        text = message_text(message).strip().removeprefix(PREFIX)
        lines.append(_result_item(name, whole_lines(text, TOOL_RESULT_MAX_TOKENS)))
    return "\n".join(lines)


def whole_lines(text: str, max_tokens: int) -> str:
    """The lines of ``text`` that fit in ``max_tokens``, each whole (a table is never cut
    mid-row), and ``… (N more lines)`` for the rest; a first line too long for the budget
    alone is cut at a token."""
    if count_tokens(text) <= max_tokens:
        return text
    lines = text.split("\n")
    kept: list[str] = []
    for line in lines:
        more = f"… ({len(lines) - len(kept) - 1} more lines)"
        if count_tokens("\n".join([*kept, line, more])) > max_tokens:
            break
        kept.append(line)
    if not kept:
        return truncate_to_tokens(text, max_tokens)
    return "\n".join([*kept, f"… ({len(lines) - len(kept)} more lines)"])


def _result_item(name: str, text: str) -> str:
    """``- name: result`` for one line; for more, ``- name:`` and the lines as a code block
    indented under the item, fenced longer than any backtick run inside."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    if not text.strip():
        return f"- {name}: (no output)"
    if "\n" not in text:
        return f"- {name}: {text.strip()}"
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    lines = text.expandtabs(4).split("\n")
    body = "\n".join(f"  {line}" if line.strip() else "" for line in lines)
    return f"- {name}:\n  {fence}text\n{body}\n  {fence}"


def _result_label(function: dict[str, Any]) -> str:
    """How an answer names a call's result: the tool, or for ``task`` the sub-agent's job."""
    name = str(function.get("name", "tool"))
    if name != "task":
        return name
    try:
        description = json.loads(function.get("arguments") or "{}").get("description")
    except (ValueError, AttributeError):
        description = None
    if not isinstance(description, str) or not description:
        return name
    return f"sub-agent **{escape_markdown(description)}**"  # the model's words, read literally


def subagent_answer(task: str) -> str:
    """A sub-agent's report: the task restated, its length and key terms."""
    terms = key_terms(task)
    words = len(task.split())
    detail = f"key terms: {', '.join(terms)}" if terms else "no key terms"
    return f"{PREFIX}Sub-agent result for: {' '.join(task.split())}\n({words} words; {detail}.)"


def plain_answer(question: str, system: str, forgotten: Sequence[str] = ()) -> str:
    """Say which variables exist when the question asks about one the notebook lacks; quote
    remembered facts sharing content words with the question; else acknowledge it.

    ``forgotten`` is what the user asked in this conversation to forget: the fold that
    removes it may still be queued, so those facts are not quoted back, and a message that
    is itself such a request is answered with what will happen."""
    if missing := _missing_variable(question, system):
        return missing
    asked_now = forget_requests([question])
    if asked_now:
        said = "; ".join(f"“{escape_markdown(a)}”" for a in asked_now)
        return (
            f"{PREFIX}Noted: memory will forget {said} when this conversation is folded "
            "into it; I will not quote it from memory meanwhile."
        )
    wanted = set(content_words(question))
    quoted = []
    for block in _MEMORY_RE.findall(system):
        for line in block.partition("\nFacts:\n")[2].splitlines():
            match = _FACT_RE.match(line.strip())
            if not match or any(overlap(f, match.group(1)) >= 0.5 for f in forgotten):
                continue
            if wanted & set(content_words(match.group(1))):
                # as stored: the block writes < > & as entities, a reply quotes the text
                quoted.append(html.unescape(match.group(1)).strip().rstrip("."))
    if quoted:
        return f"{PREFIX}From memory: " + "; ".join(dict.fromkeys(quoted)) + "."
    if not question.strip():
        return f"{PREFIX}I received an empty message."
    terms = key_terms(question)
    about = f" about {', '.join(terms)}" if terms else ""
    return (
        f"{PREFIX}I read your message{about}. I am the built-in offline model: I can call "
        "notebook tools and quote remembered facts. For real answers, configure a real "
        "model (OPENAI_API_KEY, or OPENAI_BASE_URL for another server)."
    )


def _missing_variable(question: str, system: str) -> str | None:
    """For "describe df" when the listed variables have no ``df``: name what there is."""
    found = unknown_variable(question, system)
    if found is None:
        return None
    guessed, names = found
    shown = ", ".join(f"`{n}`" for n in names[:10]) + (" …" if len(names) > 10 else "")
    has = f"it has {shown}" if names else "it has no variables yet"
    example = f" (for example: describe `{names[0]}`)" if names else ""
    return (
        f"{PREFIX}Your notebook has no variable named `{guessed}`; {has}. "
        f"Name one to look at it{example}."
    )
