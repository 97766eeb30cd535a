"""Model providers, registered at the edge: who makes a ``ChatModel`` for a model name.

In the spirit of simonw/llm's plugins, small: a ``Provider`` says which model names it
serves and makes the model for one. ``llm/`` itself ships only the OpenAI-compatible
client (``openai``, tried last: it serves any name once a key or base URL is set). Every
other provider comes in through the ``deerflow_nb.providers`` entry point group, the
package's own embedded offline model included (``offline/provider.py``, declared in
pyproject.toml); ``SHIPPED`` declares it again for a source checkout run without
installing, by name only: nothing here imports it until a model is asked for. A third
party adds a provider by declaring, in its own package::

    [project.entry-points."deerflow_nb.providers"]
    echo = "my_package.provider:PROVIDER"   # a Provider (or a function returning one)

A provider that fails to load, or whose ``serves`` raises, is reported once (a warning,
and ``doctor`` lists it) and skipped, never fatal: the other providers keep working.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING

from ..scrub import redact
from .base import ChatModel, ModelError

if TYPE_CHECKING:
    from ..config import Settings

log = logging.getLogger(__name__)

GROUP = "deerflow_nb.providers"
# The package's own providers, as entry points are written: found even when the package
# runs from a source checkout whose installed metadata predates them.
SHIPPED = ("offline = deerflow_nb.offline.provider:PROVIDER",)


@dataclass(frozen=True)
class Provider:
    """Makes chat models for the names it ``serves``; ``about`` is its line in ``doctor``."""

    name: str
    about: str
    serves: Callable[[str, Settings], bool]
    create: Callable[[Settings, str], ChatModel]
    origin: str = "built-in"


def _openai(settings: Settings, name: str) -> ChatModel:
    from .openai_client import OpenAIChatModel

    return OpenAIChatModel(name, settings.model, home=settings.home)


OPENAI = Provider(
    "openai",
    "any OpenAI-compatible endpoint (model.base_url, or api.openai.com with a key)",
    serves=lambda name, settings: not settings.is_offline,
    create=_openai,
)

_lock = threading.Lock()
_loaded: list[Provider] | None = None
_errors: dict[str, str] = {}
_skipped: dict[str, str] = {}  # provider name -> what its serves() raised


def _entry_points() -> list[EntryPoint]:
    """The group's entry points, the package's own first, then third parties' by name; a
    shipped one only when no installed distribution declares that name."""
    found = list(entry_points(group=GROUP))
    names = {ep.name for ep in found}
    for line in SHIPPED:
        name, _, value = (part.strip() for part in line.partition("="))
        if name not in names:
            found.append(EntryPoint(name, value, GROUP))
    return sorted(found, key=lambda ep: (not ep.value.startswith("deerflow_nb."), ep.name))


def _load(ep: EntryPoint) -> Provider | None:
    try:
        loaded = ep.load()
        provider = loaded() if callable(loaded) and not isinstance(loaded, Provider) else loaded
        if not isinstance(provider, Provider):
            raise TypeError(f"{ep.value} is not a deerflow_nb.llm.registry.Provider")
    except Exception as exc:  # a broken plugin must not take the others down
        _errors[ep.name] = f"{type(exc).__name__}: {exc}"
        log.warning("model provider %r (%s) could not be loaded: %s", ep.name, ep.value, exc)
        return None
    origin = "built-in" if ep.value.startswith("deerflow_nb.") else ep.value
    return Provider(provider.name, provider.about, provider.serves, provider.create, origin)


def providers() -> list[Provider]:
    """Every registered provider in the order they are asked: the package's, third
    parties', then ``openai`` (loaded once per process)."""
    global _loaded
    with _lock:
        if _loaded is None:
            loaded = [p for p in map(_load, _entry_points()) if p is not None]
            _loaded = [*loaded, OPENAI]
        return list(_loaded)


def load_errors() -> dict[str, str]:
    """``entry point name -> why it could not be loaded``."""
    providers()
    return dict(_errors)


def described() -> list[str]:
    """One line per provider (and per one that failed to load), for ``doctor`` and status."""
    lines = [
        f"{p.name} ({p.origin}): {p.about}" if p.origin != "built-in" else f"{p.name}: {p.about}"
        for p in providers()
    ]
    lines += [f"{name}: not loaded ({why})" for name, why in load_errors().items()]
    with _lock:
        skipped = dict(_skipped)
    return lines + [f"{name}: skipped ({why})" for name, why in skipped.items()]


def _serves(provider: Provider, name: str, settings: Settings) -> bool:
    """Whether ``provider`` serves ``name``; one whose ``serves`` raises is skipped, and
    said once (a warning, and its line in ``described``), not on every turn."""
    try:
        return bool(provider.serves(name, settings))
    except Exception as exc:  # a broken plugin must not break every turn
        why = redact(" ".join(f"serves() raised {type(exc).__name__}: {exc}".split()))[:200]
        with _lock:
            first = provider.name not in _skipped
            _skipped[provider.name] = why
        if first:
            log.warning("model provider %r is skipped: %s", provider.name, why)
        return False


def get_chat_model(settings: Settings, name: str | None = None) -> ChatModel:
    """The model called ``name`` (default: the configured chat model), from the first
    provider that serves it. ``"offline"`` is the embedded model; any other name needs a
    key or a base URL (or a provider that serves it), and the error says how to set one."""
    name = name or settings.chat_model_name
    for provider in providers():
        if _serves(provider, name, settings):
            return provider.create(settings, name)
    raise ModelError(
        f"model '{name}' needs an API key: set OPENAI_API_KEY (or OPENAI_BASE_URL for a "
        "local server), or use -m offline"
    )
