"""Text that must survive storage and display: encodable, and free of secrets.

- ``encodable`` keeps text faithful except for what UTF-8 cannot hold: a lone surrogate
  (``\\ud800``, which JSON's ``"\\ud800"`` escape decodes to) becomes U+FFFD, while a
  surrogate pair spelled as two code units is joined into its character. SQLite, the
  ``openai`` SDK and memory.json all encode UTF-8, and one stray code unit in a model
  reply must not cost the turn.
- ``redact`` removes API keys from text that may echo them (a server's error message
  quoting the ``Authorization`` header, say) before it reaches a cell, a traceback,
  ``last_error``, the journal or ``doctor``: the one redaction boundary. It knows every
  key the process was configured with (``remember_secret``, and the environment's
  ``*_API_KEY``, ``*_TOKEN`` and ``*_SECRET`` variables), finds any piece of one 8
  characters or longer, plain or URL-encoded, and hides the password of a
  ``user:pass@host`` URL. Redact first, cut to length after: a cut key is no longer the
  key it searches for.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

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
_MIN_PIECE = 8  # a piece of a key this long is the key's as far as a reader is concerned
# The password of a URL's user info (``https://user:pass@host``): never shown.
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s/:@]*:)[^\s/@]+@")
_KEY_ENV = re.compile(r"(?:^|_)(?:API_?KEY|TOKEN|SECRET)$", re.IGNORECASE)
_known: set[str] = set()
_known_lock = threading.Lock()


def remember_secret(value: str | None) -> None:
    """Add a configured key (or a URL whose password is one) to what ``redact`` hides."""
    if not value:
        return
    if "://" in value:  # a URL: only its password, if it has one, is secret
        try:
            value = unquote(urlsplit(value).password or "")
        except ValueError:  # a malformed URL (a bad port, say) still has its user info
            value = ""
    if len(value) >= _MIN_KEY:
        with _known_lock:
            _known.add(value)


def known_secrets() -> list[str]:
    """The remembered keys and the values of the environment's ``*_API_KEY``,
    ``*_TOKEN`` and ``*_SECRET`` variables."""
    env = [v for k, v in os.environ.items() if _KEY_ENV.search(k) and len(v) >= _MIN_KEY]
    with _known_lock:
        return sorted(_known.union(env))


def _forms(secret: str) -> set[str]:
    """A key as it may be echoed: as is and URL-encoded (upper- or lowercase escapes)."""
    forms = {secret, quote(secret, safe=""), quote_plus(secret, safe="")}
    return forms | {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), f) for f in forms}


def _hide_pieces(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every run covered by a piece (8+ characters) of a secret, or by a
    whole shorter one, replaced by one ``[redacted]``."""
    covered = bytearray(len(text))
    for secret in secrets:
        size = min(len(secret), _MIN_PIECE)
        for i in range(len(secret) - size + 1):
            piece = secret[i : i + size]
            start = text.find(piece)
            while start != -1:
                covered[start : start + size] = b"\x01" * size
                start = text.find(piece, start + 1)
    if not any(covered):
        return text
    out, i = [], 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out.append(REDACTED)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with API keys replaced by ``[redacted]``: every ``secrets`` value and every
    known key (``known_secrets``), whole, URL-encoded or any 8+ character piece of them;
    the password of a ``user:pass@`` URL; and anything shaped like a key or a bearer
    token."""
    text = str(text)
    every = {s for s in secrets if s and len(s) >= _MIN_KEY} | set(known_secrets())
    text = _hide_pieces(text, {form for secret in every for form in _forms(secret)})
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _SECRET_PATTERNS[0].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _SECRET_PATTERNS[1].sub(REDACTED, text)
    return _SECRET_PATTERNS[2].sub(lambda m: f"{m.group(1)}{REDACTED}", text)
