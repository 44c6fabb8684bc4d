"""Model adapters: the port (``base``), the OpenAI-compatible adapter (``openai``) and the
wire format it speaks (``wire``, ``inflight``).

Nothing is imported here until a name is used: the bridge's early dispatch imports
``nonoka.llm.wire`` and ``nonoka.llm.inflight`` (standard library only) before pydantic,
which ``nonoka.llm.base`` needs, is loaded.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the bridge's early path loads this package
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from nonoka.llm.base import AdoptsInflight, ChatModel, ModelResponse, TextSink, ToolSpec, Usage
    from nonoka.llm.catalog import KnownModel
    from nonoka.llm.workers import Workers
    from nonoka.state.prefix_memo import ConversationPasses

__all__ = ("AdoptsInflight", "ChatModel", "ModelResponse", "TextSink", "ToolSpec", "Usage",
           "resolve_model")

_BASE = frozenset({"AdoptsInflight", "ChatModel", "ModelResponse", "TextSink", "ToolSpec",
                   "Usage"})


def __getattr__(name: str) -> Any:
    if name in _BASE:
        from nonoka.llm import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def resolve_model(spec: str | ChatModel, *, passes: ConversationPasses | None = None,
                  known: KnownModel | None = None, project: Path | None = None,
                  headers: dict[str, str] | None = None,
                  host_retries: bool = False, workers: Workers | None = None) -> ChatModel:
    """Turn ``"openai:gpt-4o-mini"`` (or any ``provider:model``) into a model instance.

    ``passes``: where the process's passes over a growing conversation stopped last
    (``nonoka.state.prefix_memo``), for a process that runs one conversation turn after
    turn; the model then encodes only what each turn added. ``known``: the model's
    catalog entry (``nonoka.llm.catalog``), whose prices cost each call; by default the
    built-in catalog's entry for ``spec``, if it has one.

    Every prefix in ``nonoka.llm.wire.PROVIDERS`` speaks the OpenAI-compatible wire
    format; ``OPENAI_BASE_URL`` overrides the endpoint, and each provider sends only its own
    key variable (``PROVIDERS``). ``anthropic:<model>`` speaks Anthropic's Messages API
    (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``; ``nonoka.llm.anthropic``), with the
    prompt cache as ``project``'s ``.nonoka/config.toml`` sets it (``[anthropic]``).
    ``openai-responses:<model>`` speaks OpenAI's Responses API instead
    (``nonoka.llm.responses``), with ``openai:``'s endpoint and key.

    ``headers``: the host's request headers; the ones ``nonoka.llm.host_headers`` allows
    for the provider go with every request. ``host_retries``: the host retries a failed
    call itself, so the model makes each call once (``docs/protocol.md``, "Retries").
    ``workers``: the process's threads for the model's HTTP exchanges
    (``nonoka.llm.workers``), for a process that makes call after call.
    """
    if not isinstance(spec, str):
        return spec
    import os

    from nonoka.llm.host_headers import forwarded

    retries: dict[str, Any] = {"max_retries": 0} if host_retries else {}
    retries["workers"] = workers
    if spec.partition(":")[0] == "anthropic":
        from nonoka.llm.anthropic import anthropic_model

        if known is None:
            from nonoka.llm.catalog import known_model

            known = known_model(spec)
        return anthropic_model(spec, os.environ, known=known, project=project, passes=passes,
                               extra_headers=forwarded(headers, "anthropic"), **retries)
    from nonoka.llm.openai import OpenAIChatModel
    from nonoka.llm.wire import resolve_target

    target = resolve_target(spec, os.environ)
    if known is None:
        from nonoka.llm.model_ids import known as catalogued

        if catalogued(spec):
            from nonoka.llm.catalog import known_model

            known = known_model(spec)
    if spec.partition(":")[0] == "openai-responses":
        from nonoka.llm.responses import OpenAIResponsesModel

        return OpenAIResponsesModel(model=target.model, label=spec, base_url=target.base_url,
                                    api_key=target.api_key, known=known,
                                    extra_headers=forwarded(headers, "openai"), **retries)
    return OpenAIChatModel(model=target.model, label=spec, base_url=target.base_url,
                           api_key=target.api_key, passes=passes, known=known,
                           extra_headers=forwarded(headers, "openai"), **retries)
