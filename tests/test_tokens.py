"""Token counts are tiktoken's cl100k_base, exact, from the shipped file, with no network."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deerflow_nb import tokens
from deerflow_nb.tokens import (
    EncodingDataError,
    count_message_tokens,
    count_tokens,
    get_encoding,
    truncate_to_tokens,
)

# Published cl100k_base encodings: tiktoken's own tests/test_encoding.py and the
# OpenAI cookbook "How to count tokens with tiktoken".
PUBLISHED = [
    ("hello world", [15339, 1917]),
    (" \x850", [220, 126, 227, 15]),
    ("rer", [38149]),
    ("'rer", [2351, 81]),
    ("today\n ", [31213, 198, 220]),
    ("today\n \n", [31213, 27907]),
    ("today\n  \n", [31213, 14211]),
    ("\U0001f44d", [9468, 239, 235]),
    ("tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
    ("antidisestablishmentarianism", [519, 85342, 34500, 479, 8997, 2191]),
    ("2 + 2 = 4", [17, 489, 220, 17, 284, 220, 19]),
    (
        "お誕生日おめでとう",
        [33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699],
    ),
]


@pytest.mark.parametrize(("text", "ids"), PUBLISHED)
def test_matches_published_cl100k_ids(text: str, ids: list[int]) -> None:
    assert get_encoding().encode_ordinary(text) == ids
    assert count_tokens(text) == len(ids)
    assert get_encoding().decode(ids) == text


def test_special_token_text_is_counted_as_plain_text() -> None:
    # Users paste anything; "<|endoftext|>" must count, not raise.
    assert count_tokens("<|endoftext|>") > 1
    assert count_tokens("") == 0


def test_truncation_fits_the_budget_and_keeps_the_start() -> None:
    text = " ".join(f"word{i}" for i in range(500))
    cut = truncate_to_tokens(text, 20)
    assert count_tokens(cut) <= 20
    assert cut.endswith("…")
    assert text.startswith(cut[:-1].rstrip())
    assert truncate_to_tokens("short text", 20) == "short text"
    assert truncate_to_tokens(text, 0) == ""


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=400), budget=st.integers(min_value=1, max_value=60))
def test_truncation_never_exceeds_budget(text: str, budget: int) -> None:
    assert count_tokens(truncate_to_tokens(text, budget)) <= budget


def test_message_tokens_include_framing_and_tool_calls() -> None:
    plain = [{"role": "user", "content": "hello world"}]
    assert count_message_tokens(plain) == 3 + 4 + 2
    call = {"id": "c1", "type": "function", "function": {"name": "list_variables"}}
    call["function"]["arguments"] = "{}"
    with_call = plain + [{"role": "assistant", "content": None, "tool_calls": [call]}]
    expected = 3 + 4 + 2 + 4 + count_tokens("list_variables") + count_tokens("{}")
    assert count_message_tokens(with_call) == expected


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the shipped data folder that the encoding loader reads instead."""
    shipped = resources.files("deerflow_nb.data").joinpath(tokens._DATA_FILE).read_bytes()
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / tokens._DATA_FILE).write_bytes(shipped)
    monkeypatch.setattr(tokens, "resources", types.SimpleNamespace(files=lambda _pkg: folder))
    get_encoding.cache_clear()
    yield folder
    get_encoding.cache_clear()


def _edit_one_rank(raw: bytes) -> bytes:
    lines = gzip.decompress(raw).splitlines()
    token, rank = lines[1000].split()
    lines[1000] = token + b" " + str(int(rank) + 1).encode()
    return gzip.compress(b"\n".join(lines) + b"\n")


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "one rank edited": _edit_one_rank,
    "truncated": lambda raw: raw[: len(raw) // 2],
    "bytes flipped": lambda raw: raw[:100] + bytes(b ^ 0xFF for b in raw[100:110]) + raw[110:],
    "not gzip": lambda raw: b"this is not the encoding file",
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_data_file_raises_encoding_data_error(data_dir: Path, damage: str) -> None:
    path = data_dir / tokens._DATA_FILE
    path.write_bytes(DAMAGES[damage](path.read_bytes()))
    with pytest.raises(EncodingDataError, match="reinstall deerflow-nb"):
        get_encoding()


def test_missing_data_file_raises_encoding_data_error(data_dir: Path) -> None:
    (data_dir / tokens._DATA_FILE).unlink()
    with pytest.raises(EncodingDataError, match="missing"):
        get_encoding()


def test_intact_copy_loads(data_dir: Path) -> None:
    assert get_encoding().encode_ordinary("hello world") == [15339, 1917]


NO_NETWORK = """
import socket

def _refuse(*args, **kwargs):
    raise OSError("network disabled for this test")

socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
"""

PROBE = """
import json, socket
from deerflow_nb.tokens import count_tokens, get_encoding

result = {"ids": get_encoding().encode_ordinary("hello world")}
result["n"] = count_tokens("tiktoken is great!")
try:
    socket.create_connection(("127.0.0.1", 9))
    result["blocked"] = False
except OSError:
    result["blocked"] = True
try:
    import tiktoken
    tiktoken.get_encoding("cl100k_base")
    result["tiktoken_download"] = "worked"
except Exception as exc:
    result["tiktoken_download"] = type(exc).__name__
print(json.dumps(result))
"""


def test_counts_with_no_network_and_an_empty_tiktoken_cache(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(NO_NETWORK))
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(cache), PYTHONPATH=str(site))
    env.pop("DATA_GYM_CACHE_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ids"] == [15339, 1917]
    assert result["n"] == 6
    assert result["blocked"] is True
    # Plain tiktoken would have to download here; proof the guard was really in force.
    assert result["tiktoken_download"] != "worked"
    assert list(cache.iterdir()) == []


# Characters that stress cl100k_base's pre-tokenizer at line breaks: white space of every
# kind (Unicode's and Python's, which differ), punctuation, apostrophes, digits, letters.
_TRICKY = st.sampled_from(
    list("aZé9'.,<>-[]()#*:")
    + ["'s", "ll", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n"]
    + ["\u00a0", "\u2028", "\u3000", "\x85", "\x1c", "\x0b", "\U0001f44d", "日本", "0123"]
)


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(_TRICKY, max_size=80))
def test_a_long_text_counted_line_by_line_counts_exactly_as_encoded_whole(
    parts: list[str],
) -> None:
    """A long text is counted as the sum of its lines (each cached): the sum is exactly
    the whole text's encoding, whatever white space or punctuation meets a line break."""
    text = "".join(parts)
    lines = tokens._LINE_START.split(text)
    assert "".join(lines) == text
    assert sum(map(tokens._encoded_length, lines)) == len(get_encoding().encode_ordinary(text))


def test_a_new_memory_block_costs_only_its_new_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn's system prompt is new each turn (its block ranked for the turn), but most of
    its lines were counted before: only the new ones are encoded."""
    lines = [f"- Uses tool{i} for project {i % 7} work\n" for i in range(200)]
    first = "<memory>\nFacts:\n" + "".join(lines[:150]) + "</memory>"
    second = "<memory>\nFacts:\n" + "".join(lines[50:]) + "</memory>"
    assert count_tokens(first) == len(get_encoding().encode_ordinary(first))
    encoded: list[str] = []
    real = tokens._encoded_length
    monkeypatch.setattr(tokens, "_encoded_length", lambda t: encoded.append(t) or real(t))
    assert count_tokens(second) == len(get_encoding().encode_ordinary(second))
    assert sorted(encoded) == sorted(lines[150:])
