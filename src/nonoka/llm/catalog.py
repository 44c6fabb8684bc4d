"""Known models: what they accept, how much they hold, what their tokens cost.

Every built-in figure is a vendor's published one (each entry names its source); a model
whose figures could not be confirmed is left out rather than guessed, and the vendors
change them, so a project extends or overrides entries in ``.nonoka/config.toml``
(``[models."provider:model"]`` tables; ``docs/models.md``). Prices are US dollars per
million tokens.

Standard library and pydantic only, and imported only by a caller that needs it: the
bridge's start-up never loads it.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from nonoka.config import CONFIG_FILE
from nonoka.errors import ConfigurationError

__all__ = ("KnownModel", "Prices", "cost", "known_model", "models_from_config",
           "project_models")


Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""US dollars per million tokens."""


class Prices(BaseModel):
    """US dollars per million tokens. An unset cache rate bills those tokens at the input
    rate (OpenAI charges nothing extra to write its cache); an unset one-hour write rate
    bills them as five-minute writes."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    input: Rate
    output: Rate
    cache_read: Rate | None = None
    cache_write_5m: Rate | None = None
    cache_write_1h: Rate | None = None


class KnownModel(BaseModel):
    """One model: its ``provider:model`` id, limits, what it accepts, and prices."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: str
    context_tokens: PositiveInt
    max_output_tokens: PositiveInt
    image_input: bool = False
    pdf_input: bool = False
    reasoning: bool = False
    tool_calls: bool = False
    temperature: bool = True
    """It takes a sampling temperature (OpenAI's reasoning models refuse one)."""
    prices: Prices
    source: str = ""


_OPENAI = "https://platform.openai.com/docs/pricing"
_ANTHROPIC = "https://platform.claude.com/docs/en/about-claude/pricing"
_OPENROUTER = "https://openrouter.ai/models"


def _openai(id: str, context: int, output: int, prices: tuple[float, float, float], *,
            reasoning: bool = False, source: str = _OPENAI) -> KnownModel:
    """An OpenAI model: text, images and PDFs in, tools; no charge to write the cache; a
    reasoning model takes no temperature."""
    return KnownModel(id=id, context_tokens=context, max_output_tokens=output,
                      image_input=True, pdf_input=True, reasoning=reasoning, tool_calls=True,
                      temperature=not reasoning,
                      prices=Prices(input=prices[0], cache_read=prices[1], output=prices[2]),
                      source=source)


def _anthropic(id: str, context: int, output: int,
               prices: tuple[float, float, float, float, float]) -> KnownModel:
    """A Claude model: text, images and PDFs in, extended thinking, tools."""
    base, write_5m, write_1h, read, out = prices
    return KnownModel(id=id, context_tokens=context, max_output_tokens=output,
                      image_input=True, pdf_input=True, reasoning=True, tool_calls=True,
                      prices=Prices(input=base, output=out, cache_read=read,
                                    cache_write_5m=write_5m, cache_write_1h=write_1h),
                      source=_ANTHROPIC)


BUILTIN: tuple[KnownModel, ...] = (
    # id, context window, max output, (input, cached input, output)
    _openai("openai:gpt-4o", 128_000, 16_384, (2.50, 1.25, 10.00)),
    _openai("openai:gpt-4o-mini", 128_000, 16_384, (0.15, 0.075, 0.60)),
    _openai("openai:gpt-4.1", 1_047_576, 32_768, (2.00, 0.50, 8.00)),
    _openai("openai:o3", 200_000, 100_000, (2.00, 0.50, 8.00), reasoning=True),
    _openai("openai:o4-mini", 200_000, 100_000, (1.10, 0.275, 4.40), reasoning=True),
    _openai("openai:gpt-5", 400_000, 128_000, (1.25, 0.125, 10.00), reasoning=True),
    # the same models through OpenRouter, at the provider's prices
    _openai("openrouter:openai/gpt-4o", 128_000, 16_384, (2.50, 1.25, 10.00),
            source=_OPENROUTER),
    _openai("openrouter:openai/gpt-4o-mini", 128_000, 16_384, (0.15, 0.075, 0.60),
            source=_OPENROUTER),
    # id, context window, max output, (input, 5-minute write, 1-hour write, read, output)
    _anthropic("anthropic:claude-sonnet-4-5", 200_000, 64_000, (3.00, 3.75, 6.00, 0.30, 15.00)),
    _anthropic("anthropic:claude-opus-4-5", 200_000, 64_000, (5.00, 6.25, 10.00, 0.50, 25.00)),
    _anthropic("anthropic:claude-haiku-4-5", 200_000, 64_000, (1.00, 1.25, 2.00, 0.10, 5.00)),
)
"""The built-in catalog (immutable)."""

_PRICE_FIELDS = frozenset(Prices.model_fields)
_MODEL_FIELDS = frozenset(KnownModel.model_fields) - {"id", "prices"}


def cost(model: KnownModel, *, input_tokens: int, output_tokens: int,
         cached_tokens: int = 0, cache_write_tokens: int = 0,
         cache_write_1h_tokens: int = 0) -> float:
    """What one call cost, in US dollars.

    ``input_tokens`` counts every prompt token, as OpenAI's ``prompt_tokens`` does; of
    those, ``cached_tokens`` are billed at the cache-read rate, ``cache_write_tokens`` and
    ``cache_write_1h_tokens`` at the five-minute and one-hour cache-write rates, the rest
    at the input rate. ``output_tokens`` include reasoning tokens.
    """
    counts = {"input_tokens": input_tokens, "output_tokens": output_tokens,
              "cached_tokens": cached_tokens, "cache_write_tokens": cache_write_tokens,
              "cache_write_1h_tokens": cache_write_1h_tokens}
    negative = [name for name, value in counts.items() if value < 0]
    if negative:
        raise ValueError(f"{negative[0]} is negative ({counts[negative[0]]})")
    special = cached_tokens + cache_write_tokens + cache_write_1h_tokens
    if special > input_tokens:
        raise ValueError(f"cached and cache-written tokens ({special}) exceed the input "
                         f"tokens ({input_tokens}) they are part of")
    p = model.prices
    read = p.input if p.cache_read is None else p.cache_read
    write_5m = p.input if p.cache_write_5m is None else p.cache_write_5m
    write_1h = write_5m if p.cache_write_1h is None else p.cache_write_1h
    total = ((input_tokens - special) * p.input + cached_tokens * read
             + cache_write_tokens * write_5m + cache_write_1h_tokens * write_1h
             + output_tokens * p.output)
    return total / 1_000_000


def known_model(spec: str, config: Mapping[str, Any] | None = None) -> KnownModel | None:
    """The catalog's entry for ``spec`` (``"openai:gpt-4o"``), with ``config``'s
    ``[models]`` table applied; ``None`` for a model nobody described. Without a table,
    the built-in entry is looked up alone: a server resolves its model on every request,
    and building the whole catalog for one entry cost more than the rest of it."""
    if config is None or "models" not in config:
        return _builtin(spec)
    return models_from_config(config).get(spec)


def _builtin(spec: str) -> KnownModel | None:
    """``models_from_config({})[spec]``, without the other entries."""
    if spec.startswith(RESPONSES):
        base = _builtin("openai:" + spec.removeprefix(RESPONSES))
        if base is not None:
            return base.model_copy(update={"id": spec})
    found = [model for model in BUILTIN if model.id == spec]
    return found[-1] if found else None


def models_from_config(config: Mapping[str, Any],
                       builtin: Iterable[KnownModel] = BUILTIN) -> dict[str, KnownModel]:
    """The catalog by id: ``builtin``, extended and overridden by the ``[models]`` table of
    a parsed ``.nonoka/config.toml``. A table for a known id changes only the fields it
    sets; a new id must set the limits and the input and output prices."""
    catalog = {model.id: model for model in builtin}
    table = config.get("models", {})
    if not isinstance(table, Mapping):
        raise ConfigurationError(
            f"[models] in {CONFIG_FILE} is not a table; write one [models.\"provider:model\"] "
            "table per model (docs/models.md)")
    for spec, entry in table.items():
        catalog[spec] = _entry(str(spec), entry, catalog.get(spec) or _aliased(catalog, spec))
    for spec, model in list(catalog.items()):
        alias = RESPONSES + spec.removeprefix("openai:")
        if spec.startswith("openai:") and alias not in table:
            catalog[alias] = model.model_copy(update={"id": alias})
    return catalog


RESPONSES = "openai-responses:"
"""OpenAI's models through the Responses API: each ``openai:`` entry holds for the
``openai-responses:`` id of the same model (same limits, same prices), unless the
``[models]`` table describes that id itself."""


def _aliased(catalog: Mapping[str, KnownModel], spec: str) -> KnownModel | None:
    """The ``openai:`` entry an ``openai-responses:`` id starts from."""
    if not spec.startswith(RESPONSES):
        return None
    return catalog.get("openai:" + spec.removeprefix(RESPONSES))


def project_models(cwd: Path) -> dict[str, KnownModel]:
    """The catalog for the project in ``cwd``, with its ``.nonoka/config.toml`` applied."""
    path = cwd / CONFIG_FILE
    if not path.is_file():
        return models_from_config({})
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}; fix or remove it") from exc
    return models_from_config(data)


def _entry(spec: str, entry: Any, known: KnownModel | None) -> KnownModel:
    where = f"[models.\"{spec}\"] in {CONFIG_FILE}"
    if ":" not in spec:
        raise ConfigurationError(f"{where}: {spec!r} is not a model id; name it "
                                 "provider:model, e.g. [models.\"openai:my-model\"]")
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"{where} is not a table; give it fields such as "
                                 "context_tokens and input (docs/models.md)")
    unknown = sorted(set(entry) - _PRICE_FIELDS - _MODEL_FIELDS)
    if unknown:
        raise ConfigurationError(
            f"{where} has an unknown field {unknown[0]!r}; use "
            f"{', '.join(sorted(_MODEL_FIELDS | _PRICE_FIELDS))}")
    fields = known.model_dump(exclude={"id", "prices"}) if known is not None else {}
    prices = known.prices.model_dump() if known is not None else {}
    fields.update({k: v for k, v in entry.items() if k in _MODEL_FIELDS})
    prices.update({k: v for k, v in entry.items() if k in _PRICE_FIELDS})
    if known is not None and "source" not in entry:
        fields["source"] = str(CONFIG_FILE)  # its figures are the project's now
    try:
        return KnownModel.model_validate({**fields, "id": spec, "prices": prices})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"] if part != "prices")
        if first["type"] == "missing":
            raise ConfigurationError(
                f"{where} does not set {loc}; a model nonoka does not know needs "
                "context_tokens, max_output_tokens, input and output") from None
        raise ConfigurationError(f"{where}: {loc}: {first['msg']}; fix that field "
                                 "(docs/models.md lists them)") from None
