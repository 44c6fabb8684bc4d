"""``nonoka opencode init``: installs the provider and merges opencode.json idempotently."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from nonoka.cli.opencode_cmd import (
    INSTALL_DIR,
    Capabilities,
    InitError,
    init_project,
    opencode,
    shipped_provider_dir,
)


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
    assert set(nonoka["models"]) == {"openai:gpt-4o", "default"}
    assert nonoka["models"]["default"]["limit"] == {"context": 128000, "output": 16384}
    assert any("--model nonoka/default" in s for s in first.next_steps)
    assert (tmp_path / "opencode.json").stat().st_mode & 0o777 == 0o600

    text = (tmp_path / "opencode.json").read_text(encoding="utf-8")
    second = init_project(tmp_path, python="/py", model="openai:gpt-4o-mini")
    assert not second.changed
    assert (tmp_path / "opencode.json").read_text(encoding="utf-8") == text
    assert any("up to date" in a for a in second.actions)

    init_project(tmp_path, python="/py", make_default=True)
    assert _config(tmp_path)["model"] == "nonoka/default"


def test_the_model_entry_says_what_a_known_model_can_do(tmp_path: Path) -> None:
    """From the catalog: images and PDFs (else OpenCode replaces a file with an error
    text), reasoning, and the limits OpenCode compacts at and asks max_tokens by."""
    report = init_project(tmp_path, python="/py", model="openai:o4-mini")
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default == {
        "name": "nonoka (configured model)",
        "attachment": True,
        "modalities": {"input": ["text", "image", "pdf"], "output": ["text"]},
        "reasoning": True,
        "limit": {"context": 200000, "output": 100000},
    }
    assert any("input text/image/pdf; reasons; context 200000, output 100000" in a
               for a in report.actions), report.actions
    assert not any("does not know" in s for s in report.next_steps)


def test_an_unknown_model_is_described_by_options_or_the_project_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = init_project(tmp_path, python="/py", model="openai:my-model")
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default == {"name": "nonoka (configured model)"}, "nothing is guessed"
    assert any("nonoka does not know what openai:my-model can do" in s
               for s in report.next_steps), report.next_steps

    stated = Capabilities(attachments=True, reasoning=False, context=32768, output=4096)
    init_project(tmp_path, python="/py", model="openai:my-model", capabilities=stated)
    models = _config(tmp_path)["provider"]["nonoka"]["models"]  # type: ignore[index]
    assert models["default"] == {
        "name": "nonoka (configured model)", "attachment": True,
        "modalities": {"input": ["text", "image", "pdf"], "output": ["text"]},
        "reasoning": False, "limit": {"context": 32768, "output": 4096}}

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
    assert "model" not in _config(other)["provider"]["nonoka"]["options"]  # type: ignore[index]


def test_a_user_s_own_model_fields_are_kept(tmp_path: Path) -> None:
    mine = {"name": "mine", "cost": {"input": 1}, "limit": {"context": 5, "output": 1}}
    (tmp_path / "opencode.json").write_text(
        json.dumps({"provider": {"nonoka": {"models": {"default": mine}}}}), encoding="utf-8")
    init_project(tmp_path, python="/py", model="openai:unknown")
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default == {"name": "mine", "cost": {"input": 1}, "limit": {"context": 5, "output": 1}}
    init_project(tmp_path, python="/py", model="openai:gpt-4o")
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default["name"] == "mine" and default["cost"] == {"input": 1}
    assert default["limit"] == {"context": 128000, "output": 16384}


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
        "--reasoning", "--context", "64000", "--output", "8000"])
    assert result.exit_code == 0, result.output
    said = "nonoka/default (openai:m): input text/image/pdf; reasons; context 64000"
    assert said in result.output
    default = _config(tmp_path)["provider"]["nonoka"]["models"]["default"]  # type: ignore[index]
    assert default["limit"] == {"context": 64000, "output": 8000}
    assert default["reasoning"] is True
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
