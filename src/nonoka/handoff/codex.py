"""A conversation as a Codex rollout, so ``codex resume ID`` (and ``codex exec resume``)
holds it.

Codex keeps a thread as JSON lines under ``CODEX_HOME`` (else ``~/.codex``):
``sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl``, a ``session_meta`` record and
then a ``response_item`` per Responses API item; on resume it sends those items as the
history of its next request. The items are the ones nonoka's own Responses adapter
would send (``nonoka.llm.responses.input_items``): messages with their images and
files, ``function_call`` and ``function_call_output`` (a result's images as
``input_image`` parts); reasoning only where OpenAI's Responses API made it (its
``encrypted_content`` is OpenAI's alone).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from nonoka.handoff.conversation import carried
from nonoka.llm.responses import input_items
from nonoka.state.entries import MemoryEntry

VERSION = "0.171.0"
"""The Codex release whose rollout format this writes."""


def items(entries: Sequence[MemoryEntry]) -> list[dict[str, Any]]:
    """The conversation as Responses API input items, each as a rollout keeps it (an
    assistant message's text as ``output_text`` parts)."""
    out = []
    for entry in carried(entries):
        for item in input_items(entry.role, entry.content, entry.metadata):
            content = item.get("content")
            if item.get("type") == "message" and isinstance(content, str):
                kind = "output_text" if item.get("role") == "assistant" else "input_text"
                item = {**item, "content": [{"type": kind, "text": content}]}
            out.append(item)
    return out


def _stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def rollout(entries: Sequence[MemoryEntry], thread_id: str, cwd: Path,
            now: datetime) -> list[dict[str, Any]]:
    """Codex's records of the conversation: the thread's ``session_meta``, then its items."""
    stamp = _stamp(now)
    meta = {"id": thread_id, "session_id": thread_id, "timestamp": stamp, "cwd": str(cwd),
            "originator": "nonoka_handoff", "cli_version": VERSION, "source": "cli",
            "model_provider": "nonoka"}
    return [{"timestamp": stamp, "type": "session_meta", "payload": meta},
            *({"timestamp": stamp, "type": "response_item", "payload": item}
              for item in items(entries))]


def write(records: Sequence[dict[str, Any]], home: Path, thread_id: str,
          now: datetime) -> Path:
    """The rollout written where Codex finds thread ``thread_id``; its path."""
    folder = home / "sessions" / now.strftime("%Y/%m/%d")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rollout-{now.strftime('%Y-%m-%dT%H-%M-%S')}-{thread_id}.jsonl"
    with path.open("x", encoding="utf-8") as out:
        out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    return path
