"""The ids the model catalog (``nonoka.llm.catalog``) describes, on the standard library
only: a turn loads the catalog (pydantic models, prices) only for a model it knows or a
project that describes its own (``[models]`` in ``.nonoka/config.toml``).

Internal: this module's layout may change.
"""

BUILTIN_IDS = frozenset({
    "anthropic:claude-haiku-4-5",
    "anthropic:claude-opus-4-5",
    "anthropic:claude-sonnet-4-5",
    "openai:gpt-4.1",
    "openai:gpt-4o",
    "openai:gpt-4o-mini",
    "openai:gpt-5",
    "openai:o3",
    "openai:o4-mini",
    "openrouter:openai/gpt-4o",
    "openrouter:openai/gpt-4o-mini",
})
"""Kept equal to the catalog's ids by ``tests/llm/test_catalog.py``; every ``openai:`` id
is known as ``openai-responses:`` too (``known``)."""


def known(spec: str) -> bool:
    """Whether the built-in catalog describes ``spec``."""
    provider, _, model = spec.partition(":")
    return spec in BUILTIN_IDS or (provider == "openai-responses"
                                   and f"openai:{model}" in BUILTIN_IDS)
