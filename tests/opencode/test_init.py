"""``nonoka opencode init``: installs the provider and merges opencode.json idempotently."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from nonoka.cli.opencode_cmd import (
    ANTHROPIC_BETA,
    INSTALL_DIR,
    Capabilities,
    InitError,
    init_project,
    opencode,
    shipped_provider_dir,
    thinking_variants,
)
from nonoka.llm.catalog import known_model


def _config(project: Path) -> dict[str, object]:
    data = json.loads((project / "opencode.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(autouse=True)
def _no_configured_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model ``init`` describes comes from the test, never the caller's environment."""
    monkeypatch.delenv("NONOKA_MODEL", raising=False)


def test_fresh_project_gets_provider_copy_and_config(tmp_path: Path) -> None:
    report = init_project(tmp_path, python="/venv/bin/python")
    installed = tmp_path / INSTALL_DIR
    shipped = sorted(p.name for p in shipped_provider_dir().iterdir())
    assert sorted(p.name for p in installed.iterdir()) == shipped
    assert (tmp_path / ".nonoka").stat().st_mode & 0o777 == 0o700
    config = _config(tmp_path)
    assert config == {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"nonoka": {
            "npm": f"file:{installed}",
            "name": "nonoka",
            "options": {"command": ["/venv/bin/python", "-m", "nonoka", "bridge"],
                        "setCacheKey": True},
            "models": {"default": {"name": "nonoka (configured model)"}},
        }},
        "model": "nonoka/default",
    }
    assert report.changed
    assert any("installed the OpenCode provider" in a for a in report.actions)


def test_rerun_is_harmless_and_keeps_user_settings(tmp_path: Path) -> None:
    (tmp_path / "opencode.json").write_text(json.dumps({
        "theme": "dark",
        "model": "anthropic/claude-sonnet",
        "provider": {
            "other": {"npm": "@ai-sdk/openai"},
            "nonoka": {"options": {"timeoutMs": 5000, "command": ["old"]},
                       "models": {"openai:gpt-4o": {"name": "gpt-4o via nonoka"}}},
        },
    }), encoding="utf-8")
    os.chmod(tmp_path / "opencode.json", 0o600)
    first = init_project(tmp_path, python="/py", model="openai:gpt-4o-mini")
    config = _config(tmp_path)
    assert config["theme"] == "dark"
    assert config["model"] == "anthropic/claude-sonnet", "an existing default model is kept"
    providers = config["provider"]
    assert isinstance(providers, dict)
    assert providers["other"] == {"npm": "@ai-sdk/openai"}
    nonoka = providers["nonoka"]
    assert nonoka["options"] == {"timeoutMs": 5000, "command": ["/py", "-m", "nonoka", "bridge"],
                                 "setCacheKey": True,
                                 "model": "openai:gpt-4o-mini"}
    assert set(nonoka["models"]) == {"openai:gpt-4o", "openai:gpt-4o-mini", "default"}
    assert nonoka["models"]["openai:gpt-4o"] == {"name": "gpt-4o via nonoka"}
    assert nonoka["models"]["default"]["limit"] == {"context": 128000, "output": 16384}
    assert nonoka["models"]["default"]["id"] == "openai:gpt-4o-mini"
    assert any("--model nonoka/default" in s for s in first.next_steps)
    assert (tmp_path / "opencode.json").stat().st_mode & 0o777 == 0o600

    text = (tmp_path / "opencode.json").read_text(encoding="utf-8")
    second = init_project(tmp_path, python="/py", model="openai:gpt-4o-mini")
    assert not second.changed
    assert (tmp_path / "opencode.json").read_text(encoding="utf-8") == text
    assert any("up to date" in a for a in second.actions)

    # Without --model, the model an earlier --model chose (the provider's option) is
    # the one described.
    init_project(tmp_path, python="/py", make_default=True)
    config = _config(tmp_path)
    assert config["model"] == "nonoka/default"
    assert config["provider"]["nonoka"]["models"]["default"]["id"] == (  # type: ignore[index]
        "openai:gpt-4o-mini")
    assert json.dumps(config["provider"]) == json.dumps(providers)


def _entry_for(project: Path, spec: str) -> dict[str, object]:
    init_project(project, python="/py", model=spec)
    models = _config(project)["provider"]["nonoka"]["models"]  # type: ignore[index]
    assert models["default"] == {**models[spec], "name": "nonoka (configured model)",
                                 "id": spec}, "default is the model's alias"
    entry = dict(models[spec])
    assert entry.pop("name") == f"{spec} (nonoka)"
    return entry


def _catalog_fields(spec: str) -> dict[str, object]:
    """What the catalog says of ``spec``, in OpenCode's names."""
    known = known_model(spec)
    assert known is not None
    prices = known.prices
    return {
        "attachment": True,
        "modalities": {"input": ["text", "image", "pdf"], "output": ["text"]},
        "reasoning": known.reasoning,
        "temperature": known.temperature,
        "limit": {"context": known.context_tokens, "output": known.max_output_tokens},
        "cost": {"input": prices.input, "output": prices.output,
                 "cache_read": prices.cache_read if prices.cache_read is not None
                 else prices.input,
                 "cache_write": prices.cache_write_5m if prices.cache_write_5m is not None
                 else prices.input},
    }


def test_the_anthropic_beta_header_follows_the_model_and_the_users_headers_stay(
        tmp_path: Path) -> None:
    init_project(tmp_path, python="/py", model="anthropic:claude-sonnet-4-5")
    config = _config(tmp_path)
    models = config["provider"]["nonoka"]["models"]  # type: ignore[index]
    models["default"]["headers"]["x-team"] = "blue"
    (tmp_path / "opencode.json").write_text(json.dumps(config), encoding="utf-8")
    init_project(tmp_path, python="/py", model="anthropic:claude-sonnet-4-5")
    again = _config(tmp_path)["provider"]["nonoka"]["models"]  # type: ignore[index]
    assert again["default"]["headers"] == {"anthropic-beta": ANTHROPIC_BETA, "x-team": "blue"}
    init_project(tmp_path, python="/py", model="openai:gpt-4o")
    switched = _config(tmp_path)["provider"]["nonoka"]["models"]  # type: ignore[index]
    assert switched["default"]["headers"] == {"x-team": "blue"}


def test_an_openai_model_s_entry_comes_from_the_catalog(tmp_path: Path) -> None:
    """Images and PDFs (else OpenCode replaces a file with an error text), the limits
    OpenCode compacts at and asks max_tokens by, temperature (else OpenCode never sends
    an agent's), and the prices OpenCode shows a session's cost by. No reasoning, so no
    thinking variants."""
    entry = _entry_for(tmp_path, "openai:gpt-4o")
    assert entry == _catalog_fields("openai:gpt-4o")
    assert entry["temperature"] is True
    assert entry["cost"] == {"input": 2.5, "output": 10.0, "cache_read": 1.25,
                             "cache_write": 2.5}


def test_an_anthropic_model_s_entry_comes_from_the_catalog(tmp_path: Path) -> None:
    """Anthropic's cache-write rate is OpenCode's; the variants are OpenCode's for
    @ai-sdk/anthropic and this model (thinking budgets, kept below limit.output)."""
    entry = _entry_for(tmp_path, "anthropic:claude-sonnet-4-5")
    variants = entry.pop("variants")
    # The beta features OpenCode's own Anthropic provider asks for with every request.
    assert entry.pop("headers") == {"anthropic-beta": ANTHROPIC_BETA}
    assert entry == _catalog_fields("anthropic:claude-sonnet-4-5")
    assert entry["cost"] == {"input": 3.0, "output": 15.0, "cache_read": 0.3,
                             "cache_write": 3.75}
    assert variants == {"high": {"thinking": {"type": "enabled", "budgetTokens": 16000}},
                        "max": {"thinking": {"type": "enabled", "budgetTokens": 31999}}}
    assert list(variants) == ["high", "max"], "OpenCode's order: its small calls take the first"
    (tmp_path / "opus").mkdir()
    opus = _entry_for(tmp_path / "opus", "anthropic:claude-opus-4-5")["variants"]
    assert opus == {level: {"thinking": {"type": "enabled", "budgetTokens": 16000},
                            "effort": level} for level in ("low", "medium", "high")}


@pytest.mark.parametrize(("spec", "levels"), [
    ("openai:o4-mini", ["low", "medium", "high"]),
    ("openai:gpt-5", ["minimal", "low", "medium", "high"]),
    ("openai-responses:gpt-5", ["minimal", "low", "medium", "high"]),
])
def test_a_reasoning_model_s_entry_has_opencode_s_thinking_levels(
        tmp_path: Path, spec: str, levels: list[str]) -> None:
    """OpenAI's reasoning models take no temperature; each variant sets the reasoning
    effort, which every OpenAI adapter sends in its API's own field."""
    report = init_project(tmp_path, python="/py", model=spec)
    models = _config(tmp_path)["provider"]["nonoka"]["models"]  # type: ignore[index]
    entry = dict(models[spec])
    del entry["name"]
    variants = entry.pop("variants")
    assert entry == _catalog_fields(spec)
    assert entry["reasoning"] is True and entry["temperature"] is False
    assert list(variants) == levels
    assert variants == {level: {"reasoningEffort": level} for level in levels}
    limit = entry["limit"]
    said = (f"nonoka/default ({spec}): input text/image/pdf; reasons; context "
            f"{limit['context']}, output {limit['output']}; no temperature")
    assert any(a.startswith(said) and a.endswith("variants " + ", ".join(levels))
               for a in report.actions), report.actions
    assert any(f"model nonoka/{spec}, and nonoka/default as its alias" in a
               for a in report.actions), report.actions
    assert not any("does not know" in s for s in report.next_steps)


@pytest.mark.parametrize(("spec", "expected"), [
    # OpenAI's own, by name (ProviderTransform.variants for @ai-sdk/openai)
    ("openai:gpt-5.1", ["none", "low", "medium", "high"]),
    ("openai:gpt-5.2", ["none", "low", "medium", "high", "xhigh"]),
    ("openai:gpt-5.2-pro", ["medium", "high", "xhigh"]),
    ("openai:gpt-5-pro", ["high"]),
    ("openai:gpt-5-codex", ["low", "medium", "high"]),
    ("openai:gpt-5.3-codex", ["none", "low", "medium", "high", "xhigh"]),
    ("openai:gpt-5-chat-latest", []),
    ("openai:o3-deep-research", ["medium"]),
    # OpenRouter's OpenAI models, and any other OpenAI-compatible reasoning model
    ("openrouter:openai/gpt-5", ["none", "minimal", "low", "medium", "high", "xhigh"]),
    ("openai:my-thinker", ["low", "medium", "high"]),
    ("deepseek:deepseek-v4-pro", ["low", "medium", "high", "max"]),
    # models whose thinking is on or off by model: none
    ("deepseek:deepseek-reasoner", []),
    ("openai:qwen3-235b", []),
])
def test_thinking_levels_follow_opencode_s_rules(spec: str, expected: list[str]) -> None:
    variants = thinking_variants(spec, 32000)
    assert list(variants) == expected
    assert all(v == {"reasoningEffort": k} for k, v in variants.items())


def test_newer_claude_models_think_adaptively_by_effort() -> None:
    assert thinking_variants("anthropic:claude-opus-4-6", 128000) == {
        level: {"thinking": {"type": "adaptive"}, "effort": level}
        for level in ("low", "medium", "high", "max")}
    assert thinking_variants("anthropic:claude-opus-4-7", 128000) == {
        level: {"thinking": {"type": "adaptive", "display": "summarized"}, "effort": level}
        for level in ("low", "medium", "high", "xhigh", "max")}
    # An older Claude model with a small output limit: budgets stay below it.
    assert thinking_variants("anthropic:claude-3-7-sonnet", 8192) == {
        "high": {"thinking": {"type": "enabled", "budgetTokens": 4095}},
        "max": {"thinking": {"type": "enabled", "budgetTokens": 8191}}}


def test_an_unknown_model_is_described_by_options_or_the_project_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = init_project(tmp_path, python="/py", model="openai:my-model")
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default == {"name": "nonoka (configured model)", "id": "openai:my-model"}, (
        "nothing is guessed")
    assert any("nonoka does not know what openai:my-model can do" in s
               for s in report.next_steps), report.next_steps

    stated = Capabilities(attachments=True, reasoning=True, context=32768, output=4096,
                          temperature=True)
    init_project(tmp_path, python="/py", model="openai:my-model", capabilities=stated)
    models = _config(tmp_path)["provider"]["nonoka"]["models"]  # type: ignore[index]
    assert models["default"] == {
        "name": "nonoka (configured model)", "id": "openai:my-model", "attachment": True,
        "modalities": {"input": ["text", "image", "pdf"], "output": ["text"]},
        "reasoning": True, "temperature": True, "limit": {"context": 32768, "output": 4096},
        "variants": {level: {"reasoningEffort": level} for level in ("low", "medium", "high")}}
    assert "cost" not in models["default"], "no prices are guessed either"

    # Or the project describes it ([models] in .nonoka/config.toml), for the model that
    # NONOKA_MODEL names; options still override it.
    other = tmp_path / "other"
    (other / ".nonoka").mkdir(parents=True)
    (other / ".nonoka" / "config.toml").write_text(
        '[models."openai:local"]\ncontext_tokens = 8192\nmax_output_tokens = 1024\n'
        "image_input = true\ninput = 0.0\noutput = 0.0\n", encoding="utf-8")
    monkeypatch.setenv("NONOKA_MODEL", "openai:local")
    init_project(other, python="/py", capabilities=Capabilities(output=2048))
    default = _config(other)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default["modalities"] == {"input": ["text", "image"], "output": ["text"]}
    assert default["reasoning"] is False
    assert default["limit"] == {"context": 8192, "output": 2048}
    assert default["temperature"] is True
    assert default["cost"] == {"input": 0.0, "output": 0.0, "cache_read": 0.0,
                               "cache_write": 0.0}
    assert default["id"] == "openai:local"
    assert "model" not in _config(other)["provider"]["nonoka"]["options"]  # type: ignore[index]


def test_a_user_s_own_model_fields_are_kept(tmp_path: Path) -> None:
    mine = {"name": "mine", "cost": {"input": 1}, "limit": {"context": 5, "output": 1},
            "headers": {"x-team": "a"}}
    (tmp_path / "opencode.json").write_text(
        json.dumps({"provider": {"nonoka": {"models": {"default": mine}}}}), encoding="utf-8")
    init_project(tmp_path, python="/py", model="openai:unknown")
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default == {**mine, "id": "openai:unknown"}, "nothing known replaces them"
    init_project(tmp_path, python="/py", model="anthropic:claude-haiku-4-5")
    models = _config(tmp_path)["provider"]["nonoka"]["models"]  # type: ignore[index]
    default = models["default"]
    assert default["name"] == "mine"
    assert default["headers"] == {"x-team": "a", "anthropic-beta": ANTHROPIC_BETA}
    assert default["cost"] == {"input": 1.0, "output": 5.0, "cache_read": 0.1,
                               "cache_write": 1.25}
    assert default["limit"] == {"context": 200000, "output": 64000}
    assert models["openai:unknown"] == {"name": "openai:unknown (nonoka)"}


def test_a_model_switch_leaves_nothing_of_the_old_model(tmp_path: Path) -> None:
    """``default`` describes the model it runs: after a switch nothing of the previous
    model's description is left (a variant the user added to it goes too); while it stays
    the same model, a variant the user added beside OpenCode's levels stays."""
    init_project(tmp_path, python="/py", model="openai:gpt-5")
    path = tmp_path / "opencode.json"
    config = _config(tmp_path)
    models = config["provider"]["nonoka"]["models"]  # type: ignore[index]
    for name in ("default", "openai:gpt-5"):
        models[name]["variants"]["quick"] = {"reasoningEffort": "minimal", "textVerbosity": "low"}
    path.write_text(json.dumps(config), encoding="utf-8")
    init_project(tmp_path, python="/py", model="openai:gpt-5")
    models = _config(tmp_path)["provider"]["nonoka"]["models"]  # type: ignore[index]
    assert list(models["default"]["variants"]) == ["minimal", "low", "medium", "high", "quick"]

    init_project(tmp_path, python="/py", model="openai:gpt-4o")
    models = _config(tmp_path)["provider"]["nonoka"]["models"]  # type: ignore[index]
    assert "variants" not in models["default"]
    assert models["default"]["temperature"] is True
    assert models["default"]["id"] == "openai:gpt-4o"
    assert list(models["openai:gpt-5"]["variants"]) == [
        "minimal", "low", "medium", "high", "quick"], "another model's entry is left alone"

    init_project(tmp_path, python="/py", model="openai:unknown")
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default == {"name": "nonoka (configured model)", "id": "openai:unknown"}


def test_limits_need_both_numbers(tmp_path: Path) -> None:
    with pytest.raises(InitError, match="give --output too"):
        init_project(tmp_path, model="openai:unknown", capabilities=Capabilities(context=1000))
    with pytest.raises(InitError, match="cannot exceed"):
        init_project(tmp_path, model="openai:unknown",
                     capabilities=Capabilities(context=1000, output=2000))
    assert not (tmp_path / "opencode.json").exists()


def test_the_command_takes_the_capabilities(tmp_path: Path) -> None:
    result = CliRunner().invoke(opencode, [
        "init", "--dir", str(tmp_path), "--model", "openai:m", "--attachments",
        "--reasoning", "--no-temperature", "--context", "64000", "--output", "8000"])
    assert result.exit_code == 0, result.output
    said = ("nonoka/default (openai:m): input text/image/pdf; reasons; context 64000, "
            "output 8000; no temperature; variants low, medium, high")
    assert said in result.output
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default["limit"] == {"context": 64000, "output": 8000}
    assert default["reasoning"] is True and default["temperature"] is False
    bad = CliRunner().invoke(opencode, ["init", "--dir", str(tmp_path), "--context", "0"])
    assert bad.exit_code == 2


def test_a_stale_provider_copy_is_replaced(tmp_path: Path) -> None:
    init_project(tmp_path)
    installed = tmp_path / INSTALL_DIR
    (installed / "index.js").write_text("// edited", encoding="utf-8")
    (installed / "leftover.js").write_text("", encoding="utf-8")
    report = init_project(tmp_path)
    assert report.changed
    assert not (installed / "leftover.js").exists()
    shipped = shipped_provider_dir() / "index.js"
    assert (installed / "index.js").read_bytes() == shipped.read_bytes()
    # No staging folder is left behind; the folder's own .gitignore stays.
    assert [p.name for p in (tmp_path / ".nonoka").iterdir()
            if p.name.startswith(".")] == [".gitignore"]


@pytest.mark.parametrize(("content", "message"), [
    ("{ // comment\n}", "not plain JSON"),
    ("[1, 2]", "does not hold a JSON object"),
    ('{"provider": []}', '"provider" is not an object'),
])
def test_unmergeable_config_is_left_alone(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "opencode.json").write_text(content, encoding="utf-8")
    with pytest.raises(InitError, match=message):
        init_project(tmp_path)
    assert (tmp_path / "opencode.json").read_text(encoding="utf-8") == content


def test_jsonc_only_project_gets_the_block_to_paste(tmp_path: Path) -> None:
    (tmp_path / "opencode.jsonc").write_text("{}", encoding="utf-8")
    with pytest.raises(InitError, match="add this to its"):
        init_project(tmp_path)
    assert not (tmp_path / "opencode.json").exists()


def test_command_says_what_it_did(tmp_path: Path) -> None:
    result = CliRunner().invoke(opencode, ["init", "--dir", str(tmp_path)],
                                env={"NONOKA_MODEL": ""})
    assert result.exit_code == 0, result.output
    assert "installed the OpenCode provider in .nonoka/opencode-provider/" in result.output
    assert "created opencode.json" in result.output
    assert "choose nonoka's model" in result.output
    # .nonoka/ keeps itself out of git (its own .gitignore): nothing to ask of the person.
    assert ".gitignore" not in result.output
    again = CliRunner().invoke(opencode, ["init", "--dir", str(tmp_path)])
    assert again.exit_code == 0
    assert "left unchanged" in again.output

    bad = tmp_path / "opencode.json"
    bad.write_text("not json", encoding="utf-8")
    from nonoka.cli.commands import cli  # failures are reported by the root group

    failed = CliRunner().invoke(cli, ["opencode", "init", "--dir", str(tmp_path)])
    assert failed.exit_code == 1
    assert "not plain JSON" in failed.output


def test_shipped_provider_loads_in_node(tmp_path: Path) -> None:
    """The copy ``init`` installs is importable by Node and exposes a v3 provider."""
    init_project(tmp_path)
    script = ("import(process.argv[1]).then(m => { const p = m.createNonoka({name: 'nonoka'});"
              " const lm = p.languageModel('default');"
              " console.log(JSON.stringify([Object.keys(m).filter(k => k.startsWith('create')),"
              " p.specificationVersion, lm.specificationVersion])) })")
    try:
        done = subprocess.run(["node", "-e", script, str(tmp_path / INSTALL_DIR / "index.js")],
                              capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        if os.environ.get("CI"):
            raise
        pytest.skip("Node.js is not installed")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["createNonoka"], "v3", "v3"]


def test_init_keeps_the_state_folder_out_of_git_at_once(tmp_path: Path) -> None:
    """Right after ``init`` (before any turn), git ignores everything in ``.nonoka/``."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    init_project(tmp_path, python="/venv/bin/python")
    ignored = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", "-q", ".nonoka/x"],
                             check=False)
    assert ignored.returncode == 0
    status = subprocess.run(["git", "-C", str(tmp_path), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert ".nonoka" not in status
