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
    raw = _read_config(path)
    if raw is not None:
        import tomllib

        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"cannot read {path}: {exc}; fix or remove it") from exc
        model = data.get("model")
        if isinstance(model, str) and model.strip():
            return model.strip()
    raise ModelNotConfiguredError(f"no model is configured; {model_help(ask, providers)}")


def _read_config(path: Path) -> bytes | None:
    """The file's bytes, ``None`` when it is missing or not a regular file; a link is
    refused, never followed (a repository may commit one pointing at any file)."""
    import errno
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigurationError(f"{path} is a symbolic link, and nonoka never follows "
                                     "one in .nonoka/; remove it") from None
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}; fix or remove it"
                                 ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, 1 << 20)
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}; fix or remove it"
                                 ) from None
    finally:
        os.close(fd)
