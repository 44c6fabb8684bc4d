"""Each model provider is sent only its own key, whatever the project configures.

A repository chooses the provider (``.nonoka/config.toml``, a request's ``model``), so a
key that fell back to ``OPENAI_API_KEY`` could be sent to any endpoint it names. Real
``nonoka run`` processes against the scripted server; the server keeps the headers.
"""

from __future__ import annotations

import pytest

from nonoka.testing import text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem

_OPENAI_KEY = "-".join(("sk", "proj", "A1b2C3d4E5f6G7h8"))


@pytest.mark.parametrize(("model", "own_variable"), [
    ("ollama:m", "OLLAMA_API_KEY"), ("vllm:m", "VLLM_API_KEY"),
    ("llamacpp:m", "LLAMACPP_API_KEY"), ("deepseek:m", "DEEPSEEK_API_KEY"),
    ("openrouter:m", "OPENROUTER_API_KEY"),
])
def test_another_provider_never_gets_the_openai_key(project: Project,
                                                    scripted: list[ScriptItem], model: str,
                                                    own_variable: str) -> None:
    scripted.append(text("hi"))
    env = {**project.env, "OPENAI_API_KEY": _OPENAI_KEY}
    env.pop(own_variable, None)
    (project.path / ".nonoka").mkdir(exist_ok=True)
    (project.path / ".nonoka" / "config.toml").write_text(f'model = "{model}"\n')
    env.pop("NONOKA_MODEL")
    done = project.nonoka("run", "hello", env=env)
    assert done.returncode == 0, done.stderr
    [headers] = project.server.headers
    assert "authorization" not in headers, headers


def test_each_provider_sends_its_own_variable(project: Project,
                                              scripted: list[ScriptItem]) -> None:
    own = "-".join(("ollama", "key", "Z9y8X7w6V5u4"))
    scripted.extend([text("a"), text("b")])
    env = {**project.env, "OPENAI_API_KEY": _OPENAI_KEY, "OLLAMA_API_KEY": own}
    assert project.nonoka("run", "--model", "ollama:m", "one", env=env).returncode == 0
    assert project.nonoka("run", "--model", "openai:m", "two", env=env).returncode == 0
    first, second = project.server.headers
    assert first["authorization"] == f"Bearer {own}"
    assert second["authorization"] == f"Bearer {_OPENAI_KEY}"
