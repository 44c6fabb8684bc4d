"""Model adapters. Import from submodules; nothing heavy is loaded here."""

from nonoka.llm.base import ChatModel, ModelResponse, TextSink, ToolSpec, Usage

__all__ = ["ChatModel", "ModelResponse", "TextSink", "ToolSpec", "Usage", "resolve_model"]


def resolve_model(spec: "str | ChatModel") -> ChatModel:
    """Turn ``"openai:gpt-4o-mini"`` (or any ``provider:model``) into a model instance.

    Every prefix in ``nonoka.wire.PROVIDERS`` speaks the OpenAI-compatible wire format;
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` override the endpoint and key.
    """
    if not isinstance(spec, str):
        return spec
    import os

    from nonoka.llm.openai import OpenAIChatModel
    from nonoka.wire import resolve_target

    target = resolve_target(spec, os.environ)
    return OpenAIChatModel(model=target.model, label=spec, base_url=target.base_url,
                           api_key=target.api_key)
