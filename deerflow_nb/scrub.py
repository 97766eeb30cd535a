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
  ``*_API_KEY``, ``*_TOKEN`` and ``*_SECRET`` variables), finds any piece of one 6
  characters or longer, plain, URL-encoded or base64-encoded (a ``Basic`` header), and
  hides the password of a ``user:pass@host`` URL. Redact first, cut to length after: a cut
  key is no longer the key it searches for. ``RedactingFilter`` puts the HTTP libraries'
  log records through it too.
- ``public_url`` is a server's identity and address without its user info: what is written
  to the journal and sent as the URL; the credentials travel in ``basic_auth_header``.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

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
    re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=\-]{4,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)\b((?:x-)?api[-_]?key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9._~+/=\-]{6,}"),
)
_MIN_KEY = 6  # a configured key shorter than this is not searched for (it would match words)
_MIN_PIECE = 6  # a piece of a key this long is the key's as far as a reader is concerned
# The password of a URL's user info (``https://user:pass@host``): never shown, up to the
# last ``@`` of the URL, as a password may hold an unencoded ``/`` or ``@``.
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s/:@]*:)[^\s\"'<>]*@")
# A URL's user info as written, up to the URL's last ``@`` (a password's unencoded ``/``
# ends the netloc early).
_USERINFO = re.compile(r"(?i)^([a-z][a-z0-9+.\-]*://)(\S*)@")
_KEY_ENV = re.compile(r"(?:^|_)(?:API_?KEY|TOKEN|SECRET)$", re.IGNORECASE)
_known: set[str] = set()
_known_lock = threading.Lock()


def _split_userinfo(url: str) -> tuple[str, str]:
    """``(user info, url without it)``; ``""`` and ``url`` when it has none. The netloc's
    last ``@`` ends it; in a URL whose netloc a password's unencoded ``/`` cut short, the
    URL's last ``@`` does."""
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is not None and "@" in parts.netloc:
        info, _, host = parts.netloc.rpartition("@")
        return info, urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    found = _USERINFO.match(url)
    if found is None:
        return "", url
    return found.group(2), found.group(1) + url[found.end() :]


def userinfo(url: str) -> tuple[str, str] | None:
    """``(user, password)`` of a URL's ``user:pass@``, decoded; None without a password."""
    info = _split_userinfo(url)[0]
    if ":" not in info:
        return None
    user, _, password = info.partition(":")
    return unquote(user), unquote(password)


def public_url(url: str) -> str:
    """``url`` without its user info: a server's identity in the journal, in the embeddings
    cache key and in what the HTTP libraries see (they log the URL they are given)."""
    return _split_userinfo(url)[1]


def basic_auth_header(url: str) -> dict[str, str]:
    """The ``Authorization: Basic`` header a URL's ``user:pass@`` (or ``user@``) stands
    for, as httpx would send it ({} without user info): sent as a header so the URL given
    to the HTTP client carries no password."""
    info = _split_userinfo(url)[0]
    if not info:
        return {}
    user, _, password = info.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}


def remember_secret(value: str | None) -> None:
    """Add a configured key (or a URL whose password is one) to what ``redact`` hides,
    with the ``user:pass`` a ``Basic`` header carries."""
    if not value:
        return
    found: list[str] = [value]
    if "://" in value:  # a URL: only its password, if it has one, is secret
        info = userinfo(value)
        pair = b"" if info is None else f"{info[0]}:{info[1]}".encode()
        found = [] if info is None else [info[1], base64.b64encode(pair).decode("ascii")]
    with _known_lock:
        _known.update(s for s in found if len(s) >= _MIN_KEY)


def known_secrets() -> list[str]:
    """The remembered keys and the values of the environment's ``*_API_KEY``,
    ``*_TOKEN`` and ``*_SECRET`` variables."""
    env = [v for k, v in os.environ.items() if _KEY_ENV.search(k) and len(v) >= _MIN_KEY]
    with _known_lock:
        return sorted(_known.union(env))


def _forms(secret: str) -> set[str]:
    """A key as it may be echoed: as is, URL-encoded (upper- or lowercase escapes), and
    base64-encoded at each of the three byte offsets it can start at inside encoded text
    (``Basic`` of ``user:key``, say): the characters that depend on it alone."""
    forms = {secret, quote(secret, safe=""), quote_plus(secret, safe="")}
    forms |= {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), f) for f in forms}
    raw = secret.encode("utf-8")
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        forms.add(encode(raw).decode("ascii"))  # the key alone, padding and all
        for offset in range(3):
            core = encode(b"\0" * offset + raw).decode("ascii")
            core = core[4:] if offset else core  # the first group mixes in what precedes
            forms.add(core[:-4] if (offset + len(raw)) % 3 else core)  # the last, what follows
    return {f for f in forms if len(f) >= _MIN_PIECE}


def _hide_pieces(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every run covered by a piece (6+ characters) of a secret, or by a
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
    known key (``known_secrets``), whole, URL- or base64-encoded, or any 6+ character piece
    of them; the password of a ``user:pass@`` URL; and anything shaped like a key, a
    bearer token or a ``Basic`` header."""
    text = str(text)
    every = {s for s in secrets if s and len(s) >= _MIN_KEY} | set(known_secrets())
    text = _hide_pieces(text, {form for secret in every for form in _forms(secret)})
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _SECRET_PATTERNS[0].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _SECRET_PATTERNS[1].sub(REDACTED, text)
    return _SECRET_PATTERNS[2].sub(lambda m: f"{m.group(1)}{REDACTED}", text)


class RedactingFilter(logging.Filter):
    """Puts a log record's text through ``redact``: installed on the HTTP libraries' loggers
    (``redact_logs``), whose DEBUG lines show the URLs and response headers they handle."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_LOGGED_BY = ("openai", "httpx", "httpcore")  # httpx2 and httpcore2 included
_FILTER = RedactingFilter()


def redact_logs() -> None:
    """Install ``RedactingFilter`` on every logger of the HTTP stack (a filter acts on the
    logger a record is made on, so each one gets it); called whenever a client is built,
    after those libraries are imported."""
    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith(_LOGGED_BY)]
    for name in {*names, *_LOGGED_BY}:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
