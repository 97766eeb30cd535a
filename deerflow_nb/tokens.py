"""Exact token counting with tiktoken ``cl100k_base``, loaded from a file shipped in the package.

tiktoken normally downloads the encoding on first use. We ship the file (gzip) and check
its SHA-256 against the hash tiktoken itself expects, so counting works with no network
and never falls back to a character estimate.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
import zlib
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

ENCODING_NAME = "cl100k_base"
_DATA_FILE = "cl100k_base.tiktoken.gz"
# The hash tiktoken_ext.openai_public pins for cl100k_base.tiktoken.
EXPECTED_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
    r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


class EncodingDataError(RuntimeError):
    """The shipped encoding file is missing or damaged: reinstall deerflow-nb."""


@lru_cache(maxsize=1)
def get_encoding() -> tiktoken.Encoding:
    """The ``cl100k_base`` encoding, built from the shipped file after a hash check."""
    import tiktoken

    try:
        raw = gzip.decompress(resources.files("deerflow_nb.data").joinpath(_DATA_FILE).read_bytes())
    except (OSError, EOFError, zlib.error) as exc:
        raise EncodingDataError(
            f"deerflow_nb/data/{_DATA_FILE} is missing or unreadable; reinstall deerflow-nb"
        ) from exc
    digest = hashlib.sha256(raw).hexdigest()
    if digest != EXPECTED_SHA256:
        raise EncodingDataError(
            f"deerflow_nb/data/{_DATA_FILE} has hash {digest[:12]}…, expected "
            f"{EXPECTED_SHA256[:12]}…; reinstall deerflow-nb"
        )
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in raw.splitlines() if line)
    }
    return tiktoken.Encoding(
        name=ENCODING_NAME,
        pat_str=_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=_SPECIAL_TOKENS,
    )


# A line break followed by a printable ASCII character always ends a piece of
# cl100k_base's pre-tokenizer: none of ``_PAT_STR``'s patterns reads on past a line break
# into a character that is not white space. Tokens never cross pieces, so a long text's
# count is the sum of its lines' counts, exactly.
_LINE_START = re.compile(r"(?<=\n)(?=[!-~])")
_SPLIT_FROM = 512  # characters: a shorter text is encoded whole


def count_tokens(text: str) -> int:
    """Exact ``cl100k_base`` token count; special-token text is counted as plain text."""
    return _count(text) if text else 0


@lru_cache(maxsize=4096)
def _count(text: str) -> int:
    """Counts are cached: every model call re-counts the thread's history for usage and
    the summarization trigger, and those messages do not change. A long text is counted
    line by line, each line cached: a turn's system prompt is new (its ``<memory>`` block
    is ranked for the turn) but most of its lines were counted on an earlier turn."""
    if len(text) < _SPLIT_FROM:
        return _line_count(text)
    return sum(_line_count(line) for line in _LINE_START.split(text))


@lru_cache(maxsize=32768)
def _line_count(line: str) -> int:
    """A short text's or a line's count: the block's lines were counted here when it was
    packed (``block.line_cost``), so counting the prompt that holds it finds them."""
    return _encoded_length(line)


def _encoded_length(text: str) -> int:
    return len(get_encoding().encode_ordinary(text))


def truncate_to_tokens(text: str, max_tokens: int, suffix: str = "…") -> str:
    """Cut ``text`` so it (with ``suffix``) fits in ``max_tokens``; unchanged if it already fits."""
    if max_tokens <= 0:
        return ""
    enc = get_encoding()
    ids = enc.encode_ordinary(text)
    if len(ids) <= max_tokens:
        return text
    room = max_tokens - count_tokens(suffix)
    while room > 0:
        cut = enc.decode(ids[:room]).rstrip() + suffix
        if count_tokens(cut) <= max_tokens:
            return cut
        room -= 1
    return ""


def count_message_tokens(messages: list[dict]) -> int:
    """Tokens in a chat message list, with OpenAI's per-message framing overhead."""
    total = 3
    for message in messages:
        total += 4
        content = message.get("content")
        if isinstance(content, str):
            total += count_tokens(content)
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            total += count_tokens(fn.get("name", "")) + count_tokens(fn.get("arguments", ""))
    return total
