"""``POST /v1/responses/compact``'s one output item, both ways.

A compaction is a stored response: its input is the whole conversation (the path of
``previous_response_id`` and the request's items), its prompt asks the model for a
summary, and its answer is that summary, so the session keeps everything the summary
replaces (``nonoka sessions export`` shows it). The client gets exactly one
``compaction`` item, whose ``encrypted_content`` carries the summary and the id of the
response that made it; a later request that sends the item back is sent the summary,
as a user message, where the conversation it replaces was.

Standard library only.
"""

from __future__ import annotations

from typing import Any

from nonoka.serve.ids import RESPONSE_PREFIX
from nonoka.serve.sealed import seal, unseal

PREFIX = "nonoka.v1."
"""What every ``encrypted_content`` nonoka makes starts with."""
ITEM_PREFIX = "cmp_"
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"
"""The summary's lead-in, as nonoka's own compaction writes it."""
PROMPT = (
    "Summarise the conversation so far for your own later reference: it will replace "
    "the conversation. Keep every fact, decision, name, number, file, command and open "
    "task; keep what the user asked for and what is left to do; drop pleasantries. "
    "Answer with the summary only.")
"""The prompt the compaction's answer responds to."""


def compaction_item(response_id: str, summary: str) -> dict[str, Any]:
    """The item a compaction gives its client."""
    return {"type": "compaction", "id": ITEM_PREFIX + response_id[len(RESPONSE_PREFIX):],
            "encrypted_content": seal(PREFIX, {"response": response_id, "summary": summary})}


def read_compaction(item: dict[str, Any]) -> tuple[str, str] | None:
    """``(response id, summary)`` of a compaction item nonoka made, else ``None``."""
    payload = unseal(PREFIX, item.get("encrypted_content"))
    if not isinstance(payload, dict) or not isinstance(payload.get("summary"), str):
        return None
    return str(payload.get("response") or ""), payload["summary"]
