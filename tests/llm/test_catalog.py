"""The catalog of known models: lookup, prices, the project's overrides, import weight."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nonoka.errors import ConfigurationError
from nonoka.llm.catalog import (
    BUILTIN,
    KnownModel,
    Prices,
    cost,
    known_model,
    models_from_config,
    project_models,
)

SONNET = "anthropic:claude-sonnet-4-5"


def priced(**prices: float | None) -> KnownModel:
    return KnownModel(id="test:m", context_tokens=1000, max_output_tokens=100,
                      prices=Prices.model_validate(prices))


# lookup and the built-in figures ---------------------------------------------------------


def test_known_models_are_found_by_their_spec() -> None:
    gpt = known_model("openai:gpt-4o")
    assert gpt is not None
    assert (gpt.context_tokens, gpt.max_output_tokens) == (128_000, 16_384)
    assert (gpt.image_input, gpt.pdf_input, gpt.tool_calls, gpt.reasoning) \
        == (True, True, True, False)
    assert (gpt.prices.input, gpt.prices.cache_read, gpt.prices.output) == (2.50, 1.25, 10.00)
    assert gpt.prices.cache_write_5m is None  # OpenAI charges nothing to write its cache
    o3 = known_model("openai:o3")
    assert o3 is not None
    assert o3.reasoning
    sonnet = known_model(SONNET)
    assert sonnet is not None
    assert sonnet.prices == Prices(input=3.0, output=15.0, cache_read=0.30,
                                   cache_write_5m=3.75, cache_write_1h=6.0)
    assert known_model("openai:gpt-4o-2024-05-13") is None  # a snapshot is another model
    assert known_model("nobody:knows") is None


def test_every_builtin_entry_is_whole_and_consistent() -> None:
    ids = [model.id for model in BUILTIN]
    assert len(ids) == len(set(ids))
    for model in BUILTIN:
        provider, _, name = model.id.partition(":")
        assert provider in ("openai", "openrouter", "anthropic") and name, model.id
        assert model.source.startswith("https://"), model.id
        assert model.max_output_tokens < model.context_tokens, model.id
        p = model.prices
        assert 0 < p.input < p.output, model.id
        assert p.cache_read is not None
        assert p.cache_read < p.input, model.id
        if provider == "anthropic":  # Anthropic's published multipliers of the input rate
            assert (p.cache_read, p.cache_write_5m, p.cache_write_1h) == pytest.approx(
                (p.input * 0.1, p.input * 1.25, p.input * 2)), model.id
        else:
            assert (p.cache_write_5m, p.cache_write_1h) == (None, None), model.id


# the price arithmetic ----------------------------------------------------------------------


def test_cost_bills_each_kind_of_token_at_its_rate() -> None:
    sonnet = known_model(SONNET)
    assert sonnet is not None
    # 1M prompt tokens: 200k read from the cache, 100k written for 5 minutes, 50k for an
    # hour, 650k plain; 10k output.
    assert cost(sonnet, input_tokens=1_000_000, output_tokens=10_000, cached_tokens=200_000,
                cache_write_tokens=100_000, cache_write_1h_tokens=50_000) == pytest.approx(
        0.650 * 3.00 + 0.200 * 0.30 + 0.100 * 3.75 + 0.050 * 6.00 + 0.010 * 15.00)
    mini = known_model("openai:gpt-4o-mini")
    assert mini is not None
    assert cost(mini, input_tokens=2000, output_tokens=500, cached_tokens=1024) \
        == pytest.approx((976 * 0.15 + 1024 * 0.075 + 500 * 0.60) / 1e6)


def test_unset_cache_rates_fall_back_to_the_input_rate() -> None:
    model = priced(input=2.0, output=8.0)
    assert cost(model, input_tokens=1000, output_tokens=0, cached_tokens=400,
                cache_write_tokens=300, cache_write_1h_tokens=300) == pytest.approx(0.002)
    only_5m = priced(input=2.0, output=8.0, cache_write_5m=2.5)
    assert cost(only_5m, input_tokens=100, output_tokens=0, cache_write_1h_tokens=100) \
        == pytest.approx(100 * 2.5 / 1e6)  # a 1-hour write at the 5-minute rate


@pytest.mark.parametrize(("counts", "message"), [
    ({"input_tokens": -1, "output_tokens": 0}, "input_tokens is negative"),
    ({"input_tokens": 10, "output_tokens": 0, "cached_tokens": -2},
     "cached_tokens is negative"),
    ({"input_tokens": 10, "output_tokens": 0, "cached_tokens": 6, "cache_write_tokens": 5},
     r"cached and cache-written tokens \(11\) exceed the input tokens \(10\)"),
])
def test_impossible_counts_are_refused(counts: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cost(priced(input=1.0, output=1.0), **counts)


rates = st.one_of(st.none(), st.decimals(min_value=0, max_value=100, places=3).map(float))
required_rates = st.decimals(min_value=0, max_value=100, places=3).map(float)
counts = st.integers(min_value=0, max_value=10**7)


@given(input_rate=required_rates, output_rate=required_rates, read=rates, write_5m=rates,
       write_1h=rates, parts=st.tuples(counts, counts, counts, counts), output=counts)
def test_cost_is_the_exact_sum_of_its_parts(input_rate: float, output_rate: float,
                                            read: float | None, write_5m: float | None,
                                            write_1h: float | None,
                                            parts: tuple[int, int, int, int],
                                            output: int) -> None:
    plain, cached, written, written_1h = parts
    model = priced(input=input_rate, output=output_rate, cache_read=read,
                   cache_write_5m=write_5m, cache_write_1h=write_1h)
    billed = cost(model, input_tokens=sum(parts), output_tokens=output, cached_tokens=cached,
                  cache_write_tokens=written, cache_write_1h_tokens=written_1h)
    rate_5m = input_rate if write_5m is None else write_5m
    exact = (plain * Fraction(input_rate) + cached * Fraction(input_rate if read is None else read)
             + written * Fraction(rate_5m) + written_1h * Fraction(rate_5m if write_1h is None
                                                                   else write_1h)
             + output * Fraction(output_rate)) / 1_000_000
    assert billed == pytest.approx(float(exact), rel=1e-12, abs=1e-15)


@given(model=st.sampled_from(BUILTIN), prompt=counts, share=st.floats(0, 1), output=counts)
def test_a_cache_hit_never_costs_more_than_a_miss(model: KnownModel, prompt: int,
                                                  share: float, output: int) -> None:
    cached = int(prompt * share)
    hit = cost(model, input_tokens=prompt, output_tokens=output, cached_tokens=cached)
    miss = cost(model, input_tokens=prompt, output_tokens=output)
    assert hit <= miss
    assert miss == pytest.approx(hit + cached * (model.prices.input - (
        model.prices.cache_read or model.prices.input)) / 1e6, rel=1e-9, abs=1e-12)


# the project's own entries -----------------------------------------------------------------


def write_config(project: Path, text: str) -> None:
    (project / ".nonoka").mkdir(parents=True, exist_ok=True)
    (project / ".nonoka" / "config.toml").write_text(text, encoding="utf-8")


def test_a_project_adds_and_overrides_models_in_its_config(tmp_path: Path) -> None:
    write_config(tmp_path, """
model = "openai:my-model"

[models."openai:my-model"]
context_tokens = 32768
max_output_tokens = 4096
tool_calls = true
input = 1            # an integer is a price too
output = 2.5
cache_read = 0.1

[models."openai:gpt-4o"]
input = 2.0
""")
    catalog = project_models(tmp_path)
    mine = catalog["openai:my-model"]
    assert (mine.context_tokens, mine.max_output_tokens, mine.tool_calls, mine.image_input) \
        == (32768, 4096, True, False)
    assert mine.prices == Prices(input=1.0, output=2.5, cache_read=0.1)
    assert cost(mine, input_tokens=1000, output_tokens=1000, cached_tokens=1000) \
        == pytest.approx((1000 * 0.1 + 1000 * 2.5) / 1e6)
    gpt = catalog["openai:gpt-4o"]
    assert gpt.prices.input == 2.0
    assert (gpt.prices.output, gpt.context_tokens, gpt.image_input) == (10.0, 128_000, True)
    assert gpt.source == ".nonoka/config.toml"
    assert catalog[SONNET] == known_model(SONNET)  # untouched entries stay built-in


def test_without_a_config_file_the_catalog_is_the_builtin_one(tmp_path: Path) -> None:
    builtin = {model.id: model for model in BUILTIN}
    aliases = {"openai-responses:" + id.removeprefix("openai:"):
               model.model_copy(update={"id": "openai-responses:" + id.removeprefix("openai:")})
               for id, model in builtin.items() if id.startswith("openai:")}
    assert project_models(tmp_path) == {**builtin, **aliases}  # the Responses API's ids too
    assert models_from_config({}) == project_models(tmp_path)


@pytest.mark.parametrize(("toml", "message"), [
    ('[models."openai:new"]\ninput = 1.0\noutput = 2.0\n',
     r'\[models\."openai:new"\] in \.nonoka/config\.toml does not set context_tokens; a '
     r"model nonoka does not know needs context_tokens, max_output_tokens, input and output"),
    ('[models."openai:gpt-4o"]\ninptu = 1.0\n',
     r"has an unknown field 'inptu'; use cache_read, .*, tool_calls"),
    ('[models."openai:gpt-4o"]\ninput = "1.0"\n',
     r"input: Input should be a valid number; fix that field \(docs/models\.md lists them\)"),
    ('[models."openai:gpt-4o"]\ninput = -1\n', r"input: Input should be greater than"),
    ('[models."openai:gpt-4o"]\ninput = inf\n', r"input: Input should be a finite number"),
    ('[models."openai:gpt-4o"]\ntool_calls = 1\n', r"tool_calls: Input should be a valid boolean"),
    ('[models."openai:gpt-4o"]\ncontext_tokens = 0\n', r"context_tokens: Input should be greater"),
    ('[models."gpt-4o"]\ninput = 1\n', r"'gpt-4o' is not a model id; name it provider:model"),
    ('[models]\n"openai:gpt-4o" = 3\n', r'\[models\."openai:gpt-4o"\] .* is not a table'),
    ('models = 3\n', r"\[models\] in \.nonoka/config\.toml is not a table"),
    ('[models."openai:gpt-4o"\n', r"cannot read .*config\.toml: .*; fix or remove it"),
])
def test_bad_entries_get_a_one_line_error_that_says_what_to_fix(tmp_path: Path, toml: str,
                                                                message: str) -> None:
    write_config(tmp_path, toml)
    with pytest.raises(ConfigurationError, match=message) as raised:
        project_models(tmp_path)
    assert "\n" not in str(raised.value)


def test_known_model_applies_a_parsed_config() -> None:
    config: dict[str, Any] = {"models": {"openai:gpt-4o": {"output": 12.0}}}
    model = known_model("openai:gpt-4o", config)
    assert model is not None
    assert model.prices.output == 12.0
    assert known_model("openai:gpt-4o") == next(m for m in BUILTIN if m.id == "openai:gpt-4o")


# import weight -----------------------------------------------------------------------------

IMPORT_PROBE = """
import json, sys
before = set(sys.modules)
import nonoka.llm.catalog
added = sorted(set(sys.modules) - before)
print(json.dumps([m for m in added if m.split(".")[0] not in sys.stdlib_module_names
                  and not m.startswith("_sysconfigdata")]))  # the interpreter's own build data
"""


def test_the_catalog_needs_only_pydantic() -> None:
    probe = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True,
                           text=True, check=True)
    foreign = {m.split(".")[0] for m in json.loads(probe.stdout)}
    assert foreign <= {"nonoka", "pydantic", "pydantic_core", "typing_extensions",
                       "typing_inspection", "annotated_types"}
    assert "pydantic" in foreign


def test_the_stdlib_id_list_names_exactly_the_catalogs_models() -> None:
    from nonoka.llm.catalog import BUILTIN
    from nonoka.llm.model_ids import BUILTIN_IDS

    assert {m.id for m in BUILTIN} == BUILTIN_IDS


def test_an_entry_looked_up_alone_is_the_whole_catalogs() -> None:
    """``known_model`` without a ``[models]`` table finds the built-in entry alone; it is
    the entry the whole catalog holds, for every built-in id, its Responses API alias and
    an id nobody describes."""
    whole = models_from_config({})
    specs = [*whole, "openai-responses:not-in-the-catalog", "anthropic:claude-scripted"]
    assert any(spec.startswith("openai-responses:") for spec in whole)
    for spec in specs:
        assert known_model(spec) == whole.get(spec), spec
        assert known_model(spec, {"anthropic": {}}) == whole.get(spec), spec
