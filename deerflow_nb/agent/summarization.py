"""Summarization of long threads, with DeerFlow's ``summarization.*`` semantics.

A trigger (``tokens``, ``messages`` or ``fraction`` of the model's window) decides when;
``keep`` decides how much recent conversation stays verbatim; everything older is
replaced, in the model's view only, by one summary. Two invariants hold for every cut:
a tool call is never separated from its results, and the latest user message always
stays verbatim. When the current turn's own tool results still overflow, the ones the
model has already read are cut to their head (``shorten_result``). The journal keeps
every original message; only the view shrinks.
"""

from __future__ import annotations

from typing import Any

from ..config import ContextSize, SummarizationConfig
from ..llm.base import ChatModel, output_cap
from ..tokens import count_message_tokens, count_tokens, get_encoding, truncate_to_tokens
from ..untrusted import prompt_text

DEFAULT_SUMMARY_PROMPT = (
    "You compress the earlier part of a conversation between a user and an assistant "
    "working in a Jupyter notebook. Write a concise summary that keeps the user's goals, "
    "decisions, facts about their data and variables, open questions, and what the "
    "assistant already found. Write plain prose, no preamble."
)


def fired_trigger(
    config: SummarizationConfig,
    view: list[dict[str, Any]],
    conversation_len: int,
    window: int,
    tool_tokens: int = 0,
) -> ContextSize | None:
    """The first trigger that fires for this view, or None.

    ``view`` (system prompt included) and ``tool_tokens`` (the offered tool schemas) are
    what a request sends and what token triggers measure; ``messages`` triggers count
    conversation messages only.
    """
    if not config.enabled or not config.trigger:
        return None
    tokens = count_message_tokens(view) + tool_tokens
    for trigger in config.trigger:
        if trigger.type == "messages" and conversation_len >= trigger.value:
            return trigger
        if trigger.type == "tokens" and tokens >= trigger.value:
            return trigger
        if trigger.type == "fraction" and tokens >= trigger.value * window:
            return trigger
    return None


def cut_index(conversation: list[dict[str, Any]], keep: ContextSize, window: int) -> int:
    """How many leading messages to summarize (0: nothing can be summarized).

    Starts from what ``keep`` retains, then moves the cut earlier so that it never lands
    on a tool result (the call and its results stay together) and never passes the
    latest user message.
    """
    if keep.type == "messages":
        cut = len(conversation) - int(keep.value)
    else:
        budget = keep.value if keep.type == "tokens" else keep.value * window
        cut, used = len(conversation), 0
        while cut > 0:
            used += count_message_tokens([conversation[cut - 1]]) - 3
            if used > budget:
                break
            cut -= 1
    last_user = max((i for i, m in enumerate(conversation) if m["role"] == "user"), default=0)
    cut = min(max(cut, 0), last_user)
    while cut > 0 and conversation[cut]["role"] == "tool":
        cut -= 1
    return cut


# After a cut the view should fit in this share of the window, leaving room for the summary
# and the reply, even when the messages ``keep`` retains are larger than that.
FIT_SHARE = 0.7


def fit_cut(
    view: list[dict[str, Any]], history: list[dict[str, Any]], cut: int, target: int
) -> int:
    """``cut`` moved later, through ``history`` only, until the view without the cut
    messages fits ``target`` tokens: ``keep`` yields to the window, or the trigger would
    fire again on every call with the view still too large. Tool results go with their
    call, so the cut never lands on one."""
    tokens = count_message_tokens(view) - sum(count_message_tokens([m]) - 3 for m in history[:cut])
    while cut < len(history) and (tokens > target or history[cut]["role"] == "tool"):
        tokens -= count_message_tokens([history[cut]]) - 3
        cut += 1
    return cut


# However large a turn has been, a cut never aims below this share of the window: the
# summary would otherwise swallow the whole conversation for a turn that may not recur.
FLOOR_SHARE = 0.35


def turn_growth(history: list[dict[str, Any]], current: list[dict[str, Any]]) -> int:
    """Tokens one turn adds to the view, as far as this thread shows: its latest complete
    turn in ``history``, or the ``current`` turn so far if that is more. A cut leaves this
    much room under its target, so that the next calls do not fire the trigger again: a
    turn larger than the gap between the cut (``FIT_SHARE``) and the trigger used to
    summarize on every model call."""
    latest = 0
    for message in history:
        if message["role"] == "user":
            latest = 0
        latest += count_message_tokens([message]) - 3
    return max(latest, sum(count_message_tokens([m]) - 3 for m in current))


# What is left of a tool result the model has already read, when this turn's results
# alone overflow the window: its head, and a note of what was cut.
SHORT_RESULT_TOKENS = 120


def shorten_result(content: str) -> str | None:
    """``content`` cut to its first ``SHORT_RESULT_TOKENS`` tokens with a note saying so,
    or None when it is that short already."""
    enc = get_encoding()
    tokens = enc.encode_ordinary(content)
    if len(tokens) <= SHORT_RESULT_TOKENS * 2:
        return None
    cut = len(tokens) - SHORT_RESULT_TOKENS
    return (
        f"{enc.decode(tokens[:SHORT_RESULT_TOKENS])}\n… [{cut} more tokens of this result "
        "were cut from view to fit the context window; call the tool again if you need them]"
    )


def render_conversation(messages: list[dict[str, Any]]) -> list[str]:
    """One text block per message, as the summary prompt shows them."""
    blocks = []
    for message in messages:
        role = message["role"]
        content = message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = ", ".join(
                f"{c['function']['name']}({c['function']['arguments']})"
                for c in message["tool_calls"]
            )
            content = f"{content}\n[called {calls}]".strip()
        label = {"user": "User", "assistant": "Assistant", "tool": "Tool result"}.get(role, role)
        blocks.append(f"{prompt_text(label, one_line=True)}: {prompt_text(content)}")
    return blocks


def summary_request(
    config: SummarizationConfig, messages: list[dict[str, Any]], previous: str | None
) -> list[dict[str, Any]]:
    """The summary call's messages, trimmed to ``trim_tokens_to_summarize``.

    The previous summary always comes first and stays: it is the only trace of the
    distant past, so dropping it would lose that for good. It may take at most half the
    budget (cut at its end beyond that). When the messages are too long for the rest,
    the oldest are dropped first, then the remainder is cut to its newest tokens.
    """
    budget = config.trim_tokens_to_summarize
    head = ""
    if previous:
        summary = prompt_text(previous)
        head = truncate_to_tokens(f"Summary so far: {summary}", max(budget // 2, 1)) + "\n"
    room = max(budget - count_tokens(head), 1)
    blocks = render_conversation(messages)
    sizes = [count_tokens(b) + 1 for b in blocks]
    start, total = 0, sum(sizes)
    while total > room and start < len(blocks) - 1:
        total -= sizes[start]
        start += 1
    tail = "\n".join(blocks[start:])
    if count_tokens(tail) > room:
        enc = get_encoding()
        tail = enc.decode(enc.encode_ordinary(tail)[-room:])
    body = head + tail
    return [
        {"role": "system", "content": config.summary_prompt or DEFAULT_SUMMARY_PROMPT},
        {
            "role": "user",
            "content": f"<conversation_to_summarize>\n{body}\n</conversation_to_summarize>",
        },
    ]


# A summary compresses what it is sent at least this much: its output cap is the
# sent budget (``trim_tokens_to_summarize``) over this, and never under SUMMARY_MIN_TOKENS.
SUMMARY_RATIO = 4
SUMMARY_MIN_TOKENS = 256


def summary_cap(config: SummarizationConfig) -> int:
    """The summary call's output cap, sized to what it compresses."""
    return max(config.trim_tokens_to_summarize // SUMMARY_RATIO, SUMMARY_MIN_TOKENS)


def summarize(
    model: ChatModel,
    config: SummarizationConfig,
    messages: list[dict[str, Any]],
    previous: str | None,
) -> tuple[str, Any]:
    """Ask ``model`` for the summary, capped (``summary_cap``); part of the user's turn,
    so it never gives way. Returns ``(text, usage)``."""
    request = summary_request(config, messages, previous)
    cap = output_cap(summary_cap(config), model.max_input_tokens, request)
    result = model.bounded(request, max_output_tokens=cap, background=False)
    return result.content.strip(), result.usage
