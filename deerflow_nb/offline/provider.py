"""The offline model as a provider (``llm.registry``): it serves the name ``offline``.

Declared as the ``offline`` entry point of the ``deerflow_nb.providers`` group, so the model
factory finds it the way it finds a third party's, and ``llm/`` never imports ``offline/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..llm.registry import Provider

if TYPE_CHECKING:
    from ..config import Settings
    from ..llm.base import ChatModel


def _create(settings: Settings, name: str) -> ChatModel:
    from .model import OfflineModel

    return OfflineModel()


PROVIDER = Provider(
    "offline",
    "the embedded offline model: deterministic, no key, no network",
    serves=lambda name, settings: name == "offline",
    create=_create,
)
