"""The provider: the client side of ``nonoka bridge``, for scripts and tests.

``NonokaProvider`` is the Python twin of the OpenCode provider: it shapes each request
from the host's history (docs/protocol.md §7), spawns one bridge process per call, and keeps the
chat session id in memory and in ``<cwd>/.nonoka/provider-session.id``.
"""

from nonoka.provider.client import (
    DEFAULT_CANCEL_GRACE,
    DEFAULT_TIMEOUT,
    EventCallback,
    MessageLike,
    NonokaProvider,
    ProviderStream,
    ToolLike,
    default_command,
)
from nonoka.provider.idfile import (
    ID_FILE_NAME,
    clear_session_id,
    id_file_path,
    is_plausible_session_id,
    read_session_id,
    write_session_id,
)
from nonoka.provider.process import BridgeError, BridgeTimeoutError
from nonoka.provider.result import ProviderResult

__all__ = (
    "DEFAULT_CANCEL_GRACE",
    "DEFAULT_TIMEOUT",
    "ID_FILE_NAME",
    "BridgeError",
    "BridgeTimeoutError",
    "EventCallback",
    "MessageLike",
    "NonokaProvider",
    "ProviderResult",
    "ProviderStream",
    "ToolLike",
    "clear_session_id",
    "default_command",
    "id_file_path",
    "is_plausible_session_id",
    "read_session_id",
    "write_session_id",
)
