"""Session ids: the one rule every door (the runtime, the bridge, the provider, import)
checks an id against.

Internal: this module's layout may change.
"""

from __future__ import annotations

import re

from nonoka.errors import ConfigurationError

SESSION_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def validate_session_id(session_id: str) -> str:
    """Accept only ids that are safe in a file name, a URL and a log line."""
    if not isinstance(session_id, str) or not SESSION_ID_PATTERN.fullmatch(session_id):
        raise ConfigurationError(
            f"invalid session id {session_id!r}: use 1-128 characters of letters, digits, "
            "'.', '_', ':' or '-', starting with a letter or digit"
        )
    return session_id
