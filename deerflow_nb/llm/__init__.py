"""Chat models: the interface, the OpenAI-compatible client, and `get_chat_model`, which
picks the configured model or the embedded offline one (``offline/``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import ChatModel, ChatResult, ModelError, ToolCall, Usage

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["ChatModel", "ChatResult", "ModelError", "ToolCall", "Usage", "get_chat_model"]


def get_chat_model(settings: Settings, name: str | None = None) -> ChatModel:
    """The model called ``name`` (default: the configured chat model).

    ``"offline"`` is the embedded model. Any other name needs a key or a base URL;
    without one the error says how to configure it.
    """
    name = name or settings.chat_model_name
    if name == "offline":
        from ..offline.model import OfflineModel

        return OfflineModel()
    if settings.is_offline:
        raise ModelError(
            f"model '{name}' needs an API key: set OPENAI_API_KEY (or OPENAI_BASE_URL for a "
            "local server), or use -m offline"
        )
    from .openai_client import OpenAIChatModel

    return OpenAIChatModel(name, settings.model, home=settings.home)
