"""Project configuration: which model to use when a request does not say.

Order: the explicit value (a request's ``model``, a ``--model`` flag), then the
``NONOKA_MODEL`` environment variable, then ``model = "..."`` in
``<cwd>/.nonoka/config.toml``.

Internal: not part of the public API (docs/architecture.md, "Public API").
"""

from __future__ import annotations

import os
from pathlib import Path

from nonoka.errors import ConfigurationError, ModelNotConfiguredError

CONFIG_FILE = Path(".nonoka") / "config.toml"

BRIDGE_ASK = "pass `model` in the request (provider.nonoka.options.model in opencode.json)"
"""How a bridge request names its model (the default: the bridge is the front end that
asks most often)."""
RUN_ASK = "pass --model PROVIDER:MODEL"
"""How ``nonoka run`` names its model."""


def model_help(ask: str = BRIDGE_ASK, providers: str = "") -> str:
    """Every way to configure a model, ``ask`` (the command's own way) first; then the
    ``providers`` there are (``nonoka.llm.wire.provider_choices``), or where they are
    listed."""
    where = (f"the providers are {providers} (`nonoka help models` lists their variables)"
             if providers else "`nonoka help models` lists the providers and their variables")
    return (f"{ask}, set NONOKA_MODEL (e.g. NONOKA_MODEL=openai:gpt-4o-mini), or add "
            f"model = \"openai:gpt-4o-mini\" to {CONFIG_FILE}; {where}")


MODEL_HELP = model_help()


def configured_model(cwd: Path, explicit: str | None = None, *, ask: str = BRIDGE_ASK,
                     providers: str = "") -> str:
    """The model spec to use, or a ``ModelNotConfiguredError`` that says how to set one
    (``ask``, ``providers``: as ``model_help`` takes them, for the calling command; a
    ``ConfigurationError`` when the config file cannot be read)."""
    if explicit:
        return explicit
    from_env = os.environ.get("NONOKA_MODEL", "").strip()
    if from_env:
        return from_env
    path = cwd / CONFIG_FILE
    if path.is_file():
        import tomllib

        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"cannot read {path}: {exc}; fix or remove it") from exc
        model = data.get("model")
        if isinstance(model, str) and model.strip():
            return model.strip()
    raise ModelNotConfiguredError(f"no model is configured; {model_help(ask, providers)}")
