"""The ``encrypted_content`` nonoka gives its clients: a prefix naming what it holds, then
its JSON in URL-safe base64.

It is opaque to a client and never a secret (it holds what the client's own conversation
said); the prefix tells nonoka's own payloads from another server's, which nonoka cannot
read. Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any


def seal(prefix: str, payload: object) -> str:
    """``payload`` as an ``encrypted_content`` starting with ``prefix``."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return prefix + base64.urlsafe_b64encode(text.encode()).decode()


def unseal(prefix: str, content: object) -> Any:
    """What ``seal(prefix, ...)`` made ``content`` from; ``None`` when it is not one."""
    if not isinstance(content, str) or not content.startswith(prefix):
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(content[len(prefix):].encode()))
    except (ValueError, binascii.Error):
        return None
