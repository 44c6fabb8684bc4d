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

MODEL_HELP = (
    "set one: pass `model` in the request (or --model), set NONOKA_MODEL "
    "(e.g. NONOKA_MODEL=openai:gpt-4o-mini), or add model = \"openai:gpt-4o-mini\" to "
    f"{CONFIG_FILE}; for an OpenAI-compatible endpoint also set OPENAI_BASE_URL and "
    "OPENAI_API_KEY"
)


def configured_model(cwd: Path, explicit: str | None = None) -> str:
    """The model spec to use, or a ``ModelNotConfiguredError`` that says how to set one
    (a ``ConfigurationError`` when the config file cannot be read)."""
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
    raise ModelNotConfiguredError(f"no model is configured; {MODEL_HELP}")
