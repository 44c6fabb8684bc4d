"""Model adapters. Import from submodules; nothing heavy is loaded here."""

from nonoka.llm.base import ChatModel, ModelResponse, TextSink, ToolSpec, Usage

__all__ = ["ChatModel", "ModelResponse", "TextSink", "ToolSpec", "Usage", "resolve_model"]


def resolve_model(spec: "str | ChatModel") -> ChatModel:
    """Turn ``"openai:gpt-4o-mini"`` (or any ``provider:model``) into a model instance.

    ``openai:`` (and the aliases ``deepseek:``, ``vllm:``, ``ollama:``, ``openrouter:``,
    ``llamacpp:``) all speak the OpenAI-compatible wire format; the endpoint comes from
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``.
    """
    if not isinstance(spec, str):
        return spec
    from nonoka.errors import ConfigurationError

    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise ConfigurationError(
            f"model {spec!r} is not of the form 'provider:model', e.g. 'openai:gpt-4o-mini'"
        )
    if provider in {"openai", "deepseek", "vllm", "ollama", "openrouter", "llamacpp"}:
        from nonoka.llm.openai import OpenAIChatModel

        return OpenAIChatModel(model=model, label=spec)
    raise ConfigurationError(
        f"unknown model provider {provider!r} in {spec!r}; use 'openai:<model>' for any "
        "OpenAI-compatible endpoint (set OPENAI_BASE_URL to point at it)"
    )
