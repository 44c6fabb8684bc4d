"""A reasoning item's ``encrypted_content``, both ways.

A client that keeps no state on the server (``store: false``: Codex, the AI SDK) asks
for ``include: ["reasoning.encrypted_content"]`` and sends the reasoning items back
with its next request. nonoka's ``encrypted_content`` carries what the provider wants
back with the reasoning — its signature, its encrypted form — and the reasoning's text,
so a history that comes back as the client kept it still gives the provider its own
reasoning, even where the server finds no stored line for it (another database, a
history edited on the client's side).

It is opaque to the client but not encrypted: it holds only what the provider sent,
which the provider checks itself when it comes back. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nonoka.serve.sealed import seal, unseal
from nonoka.state.messages import ReasoningPart

PREFIX = "nonoka.reasoning.v1."
"""What every reasoning ``encrypted_content`` nonoka makes starts with."""
INCLUDE = "reasoning.encrypted_content"
"""The ``include`` value that asks for it."""


def sealed(parts: Sequence[ReasoningPart]) -> str:
    """The ``encrypted_content`` of an answer's reasoning ``parts``."""
    return seal(PREFIX, [{"text": part.text, **({"provider_metadata": part.provider_metadata}
                                                  if part.provider_metadata else {})}
                         for part in parts])


def unsealed(content: Any) -> list[ReasoningPart] | None:
    """The reasoning parts ``content`` carries, or ``None`` when nonoka did not make it
    (another server's encrypted reasoning, which no provider of nonoka's can read)."""
    payload = unseal(PREFIX, content)
    if not isinstance(payload, list):
        return None
    parts = []
    for raw in payload:
        if not isinstance(raw, dict) or not isinstance(raw.get("text", ""), str):
            return None
        meta = raw.get("provider_metadata")
        parts.append(ReasoningPart(text=raw.get("text", ""),
                                   provider_metadata=meta if isinstance(meta, dict) else None))
    return parts


def wants_sealed(body: Any) -> bool:
    """Whether a create request asks for its reasoning's ``encrypted_content``."""
    include = body.get("include") if isinstance(body, dict) else None
    return isinstance(include, list) and INCLUDE in include
