"""What a turn needs before it can start: the project's stores and its model.

Every front end opens them through here, so a failure a person can fix is named the
same way (and carries the same error code) whoever met it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nonoka.errors import ConfigurationError, ModelNotConfiguredError, WorkspaceError
from nonoka.store.project import (
    ProjectStores,
    database_target,
    database_url_from_env,
    open_project_stores,
)

if TYPE_CHECKING:
    from nonoka.llm.base import ChatModel
    from nonoka.llm.catalog import KnownModel
    from nonoka.llm.workers import Workers
    from nonoka.state.prefix_memo import ConversationPasses
    from nonoka.store.reuse import StoreReuse


def open_stores(project: Path, reuse: StoreReuse | None = None) -> ProjectStores:
    """The project's stores (``NONOKA_DATABASE_URL`` honoured).

    Raises ``WorkspaceError`` when ``.nonoka/`` cannot be created, ``StoreError`` (or a
    subclass) when the database cannot be opened, ``ConfigurationError`` for a bad URL.
    ``reuse``: what the checkpoint store keeps between calls, when the process shares it
    between the stores it opens (``nonoka.store.reuse``).
    """
    try:
        return open_project_stores(project, database_url_from_env(), reuse=reuse)
    except OSError as exc:
        raise WorkspaceError(
            f"cannot create {project / '.nonoka'}: {exc.strerror or exc}; make the workspace "
            "writable for this user, or point NONOKA_DATABASE_URL at a writable place",
        ) from None


def project_database(project: Path) -> str:
    """Which database ``open_stores`` opens for ``project``: ``engine:target``."""
    engine, target = database_target(project, database_url_from_env())
    return f"{engine}:{target}"


def described(project: Path, spec: str) -> KnownModel | None:
    """The catalog's entry for ``spec`` with the project's own ``[models]`` applied; the
    catalog is not loaded for a model neither describes."""
    from nonoka.llm.model_ids import known as catalogued

    config = project / ".nonoka" / "config.toml"
    if not (config.is_file() and "[models" in _text(config)):
        if not catalogued(spec):
            return None
        from nonoka.llm.catalog import known_model

        return known_model(spec)
    from nonoka.llm.catalog import project_models

    return project_models(project).get(spec)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def configured(project: Path, explicit: str | None = None, *,
               passes: ConversationPasses | None = None,
               headers: dict[str, str] | None = None, host_retries: bool = False,
               workers: Workers | None = None) -> ChatModel:
    """The model to run: ``explicit``, else ``NONOKA_MODEL``, else ``.nonoka/config.toml``;
    ``headers``, ``host_retries`` and ``workers`` as ``nonoka.llm.resolve_model`` takes
    them.

    Raises ``ModelNotConfiguredError`` when there is none or it cannot be used.
    """
    from nonoka.config import configured_model
    from nonoka.llm import resolve_model

    try:
        spec = configured_model(project, explicit)
        return resolve_model(spec, passes=passes, known=described(project, spec),
                             project=project, headers=headers, host_retries=host_retries,
                             workers=workers)
    except ModelNotConfiguredError:
        raise
    except ConfigurationError as exc:
        raise ModelNotConfiguredError(str(exc)) from exc
