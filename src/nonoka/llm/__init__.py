"""Model adapters. Import from submodules; nothing heavy is loaded here."""

from nonoka.llm.base import ChatModel, ModelResponse, TextSink, ToolSpec, Usage

__all__ = ["ChatModel", "ModelResponse", "TextSink", "ToolSpec", "Usage", "resolve_model"]


PROVIDERS: dict[str, tuple[str | None, str]] = {
    "openai": (None, "OPENAI_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "vllm": ("http://127.0.0.1:8000/v1", "OPENAI_API_KEY"),
    "ollama": ("http://127.0.0.1:11434/v1", "OPENAI_API_KEY"),
    "llamacpp": ("http://127.0.0.1:8080/v1", "OPENAI_API_KEY"),
}
"""Provider prefixes that speak the OpenAI-compatible wire format: default base URL (used
when ``OPENAI_BASE_URL`` is unset) and the variable holding the key."""


def resolve_model(spec: "str | ChatModel") -> ChatModel:
    """Turn ``"openai:gpt-4o-mini"`` (or any ``provider:model``) into a model instance.

    Every prefix in ``PROVIDERS`` speaks the OpenAI-compatible wire format;
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` override the endpoint and key.
    """
    if not isinstance(spec, str):
        return spec
    from nonoka.errors import ConfigurationError

    provider, sep, model = spec.partition(":")
    if not sep or not model:
        raise ConfigurationError(
            f"model {spec!r} is not of the form 'provider:model', e.g. 'openai:gpt-4o-mini'"
        )
    if provider in PROVIDERS:
        import os

        from nonoka.llm.openai import OpenAIChatModel

        default_url, key_variable = PROVIDERS[provider]
        base_url = os.environ.get("OPENAI_BASE_URL") or default_url
        api_key = os.environ.get(key_variable) or os.environ.get("OPENAI_API_KEY")
        return OpenAIChatModel(model=model, label=spec, base_url=base_url, api_key=api_key)
    raise ConfigurationError(
        f"unknown model provider {provider!r} in {spec!r}; use 'openai:<model>' for any "
        "OpenAI-compatible endpoint (set OPENAI_BASE_URL to point at it)"
    )
