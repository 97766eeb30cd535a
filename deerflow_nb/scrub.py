"""Text that must survive storage and display: encodable, and free of secrets.

- ``encodable`` keeps text faithful except for what UTF-8 cannot hold: a lone surrogate
  (``\\ud800``, which JSON's ``"\\ud800"`` escape decodes to) becomes U+FFFD, while a
  surrogate pair spelled as two code units is joined into its character. SQLite, the
  ``openai`` SDK and memory.json all encode UTF-8, and one stray code unit in a model
  reply must not cost the turn.
- ``redact`` removes API keys from text that may echo them (a server's error message
  quoting the ``Authorization`` header, say) before it reaches a cell, ``last_error``
  or the journal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REPLACEMENT = "\ufffd"
REDACTED = "[redacted]"


def encodable(text: str) -> str:
    """``text`` with every code point UTF-8 cannot encode replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Through UTF-16: a pair of surrogate code units becomes its character, a lone
        # one U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def encodable_deep(value: Any) -> Any:
    """``value`` (str, or lists and dicts of them) with every string made ``encodable``;
    the input itself is returned when nothing needed replacing."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, dict):
        out = {encodable_deep(k): encodable_deep(v) for k, v in value.items()}
        return value if _same(out, value) else out
    if isinstance(value, list | tuple):
        items = [encodable_deep(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items) if isinstance(value, tuple) else items
    return value


def _same(new: dict[Any, Any], old: dict[Any, Any]) -> bool:
    """True when ``new`` holds the very keys and values of ``old`` (nothing replaced)."""
    return len(new) == len(old) and all(
        a is b and c is d for (a, c), (b, d) in zip(new.items(), old.items(), strict=True)
    )


# An OpenAI-style key (sk-…, sk-proj-…), a bearer token, or an api-key header value.
_SECRET_PATTERNS = (
    re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/=\-]{4,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)\b((?:x-)?api[-_]?key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9._~+/=\-]{6,}"),
)
_MIN_KEY = 6  # a configured key shorter than this is not searched for (it would match words)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with API keys replaced by ``[redacted]``: every ``secrets`` value (the
    configured keys) wherever it appears, and anything shaped like a key or a bearer
    token."""
    for secret in secrets:
        if secret and len(secret) >= _MIN_KEY and secret in text:
            text = text.replace(secret, REDACTED)
    text = _SECRET_PATTERNS[0].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _SECRET_PATTERNS[1].sub(REDACTED, text)
    return _SECRET_PATTERNS[2].sub(lambda m: f"{m.group(1)}{REDACTED}", text)
