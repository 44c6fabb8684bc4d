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
    raise ModelNotConfiguredError(f"no model is configured; {MODEL_HELP}")


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
