"""Chat models: the interface, the OpenAI-compatible client, and ``get_chat_model``, which
asks the registered providers (``registry``: the offline model and any third party's
come in through the ``deerflow_nb.providers`` entry points) for the configured model."""

from __future__ import annotations

from .base import ChatModel, ChatResult, ModelError, ToolCall, Usage
from .registry import Provider, get_chat_model, providers

__all__ = [
    "ChatModel",
    "ChatResult",
    "ModelError",
    "Provider",
    "ToolCall",
    "Usage",
    "get_chat_model",
    "providers",
]
