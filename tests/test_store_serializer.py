"""memory.json through orjson: the same JSON, the same strictness, DeerFlow's layout."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deerflow_nb.memory.store import (
    MemoryFileError,
    MemoryStore,
    dumps_document,
    empty_memory,
    encoded_document,
    loads_document,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",))),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(data=st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_written_text_is_jsons_indent_2_layout_and_reads_back(data: dict) -> None:
    payload = dumps_document(data)
    # Byte for byte what DeerFlow's json.dump(indent=2, ensure_ascii=False) writes, plus a
    # final line break, except for how a float is spelled (orjson: 1e+16, json: 1e16).
    expected = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if not any(isinstance(v, float) for v in _leaves(data)):
        assert payload.decode("utf-8") == expected
    assert loads_document(payload) == json.loads(expected)


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_on_write(bad: float) -> None:
    data = empty_memory()
    data["facts"] = [{"id": "a", "content": "x", "confidence": bad}]
    with pytest.raises(ValueError):
        dumps_document(data)
    data["facts"][0]["extra"] = {"deep": [bad]}
    data["facts"][0]["confidence"] = 0.9
    with pytest.raises(ValueError):
        dumps_document(data)


def test_a_null_and_null_like_text_are_fine() -> None:
    data = {"a": None, "b": "annulled", "c": [None, 1.5]}
    assert loads_document(dumps_document(data)) == data


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"a": NaN}', "NaN is not JSON"),
        (b'{"a": Infinity}', "Infinity is not JSON"),
        (b'{"a": -Infinity}', "-Infinity is not JSON"),
        (b'{"a": 1e400}', "too large for JSON"),
        (b'{"a": ' + b"9" * 31 + b"}", "31 digits"),
    ],
)
def test_strict_numbers_on_read(raw: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        loads_document(raw)
    with pytest.raises(ValueError, match=says):
        loads_document(raw.decode())


def test_long_integers_read_exactly_as_json_reads_them() -> None:
    # orjson would read these as floats; memory.json keeps them exact.
    for digits in (19, 20, 25, 30):
        number = int("7" * digits)
        assert loads_document(f'{{"n": {number}, "m": -{number}}}'.encode()) == {
            "n": number,
            "m": -number,
        }
    assert loads_document(dumps_document({"n": 10**25})) == {"n": 10**25}


def test_nesting_too_deep_is_one_line() -> None:
    with pytest.raises(ValueError, match="deeper than can be read"):
        loads_document(b"[" * 100_000 + b"]" * 100_000)


def test_lone_surrogates_are_written_as_replacement_characters() -> None:
    data = {"facts": [{"content": "bad \ud800 text", "ok": "fine \U0001f600"}]}
    assert loads_document(dumps_document(data)) == {
        "facts": [{"content": "bad \ufffd text", "ok": "fine \U0001f600"}]
    }
    written, payload = encoded_document(data)
    assert written["facts"][0]["content"] == "bad \ufffd text"
    assert loads_document(payload) == written
    clean = {"facts": [{"content": "fine"}]}
    assert encoded_document(clean)[0] is clean  # nothing to replace: the very document
    # A lone surrogate escaped in the file is read as json reads it.
    assert loads_document(b'{"a": "\\ud800"}') == {"a": "\ud800"}


def test_store_reads_what_it_wrote_and_still_checks_what_others_wrote(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "memory.json")
    data = empty_memory()
    data["facts"] = [
        {
            "id": "fact_1",
            "content": "Prefers polars",
            "category": "preference",
            "confidence": 0.9,
            "createdAt": "2026-01-01T00:00:00Z",
            "source": "t",
        }
    ]
    with store.locked():
        store.write(data)
    text = store.path.read_text(encoding="utf-8")
    assert text.startswith('{\n  "version": "1.0",\n') and text.endswith("}\n")
    assert store.read() == data
    assert store.read() is not store.read()  # a private copy each time
    # The same kind of bytes from elsewhere with a broken schema are still refused.
    broken = dict(data, facts=[{"id": 1, "content": None}])
    store.path.write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(MemoryFileError):
        store.read()
