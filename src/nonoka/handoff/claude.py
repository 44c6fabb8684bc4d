"""A conversation as Claude Code's own transcript, so ``claude --resume ID`` holds it.

Claude Code keeps a session as JSON lines under its config directory
(``CLAUDE_CONFIG_DIR``, else ``~/.claude``): ``projects/<cwd, every character but
letters and digits a dash>/<session id>.jsonl``, one record per message, each naming
its parent's ``uuid``; on ``--resume`` it sends the messages of the chain as the
history of its next request. The messages are the ones nonoka's own Anthropic adapter
would send (``nonoka.llm.anthropic_wire.Conversation``): texts, images and PDFs, tool
calls as ``tool_use`` and their results (with their images) as ``tool_result``,
consecutive messages of one role merged; thinking only where Anthropic signed it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from nonoka.handoff.conversation import calls_of, carried
from nonoka.llm.anthropic_wire import Conversation
from nonoka.state.entries import MemoryEntry

VERSION = "2.1.332"
"""The Claude Code release whose transcript format this writes."""


def project_dir(config_dir: Path, cwd: Path) -> Path:
    """Where Claude Code keeps the transcripts of sessions run in ``cwd``."""
    slug = "".join(c if c.isascii() and c.isalnum() else "-" for c in str(cwd))
    return config_dir / "projects" / slug


def messages(entries: Sequence[MemoryEntry]) -> list[dict[str, Any]]:
    """The conversation in the Messages API's shape (``role``, ``content`` blocks)."""
    conversation = Conversation()
    for entry in carried(entries):
        meta = entry.metadata
        call_id = meta.get("tool_call_id") if entry.role == "tool" else None
        conversation.add(entry.role, entry.content, meta, calls_of(entry) or None,
                         str(call_id) if call_id is not None else None)
    return [{"role": role, "content": [json.loads(text) for _, text in blocks]}
            for role, blocks in conversation.messages]


def transcript(entries: Sequence[MemoryEntry], session_id: str, cwd: Path,
               now: datetime, model: str = "") -> list[dict[str, Any]]:
    """Claude Code's records of the conversation: one per message, chained by
    ``parentUuid``."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    records: list[dict[str, Any]] = []
    parent: str | None = None
    for message in messages(entries):
        role = message["role"]
        record_id = str(uuid.uuid4())
        body: dict[str, Any] = message if role == "user" else {
            "id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
            "model": model or "nonoka-handoff", "content": message["content"],
            "stop_reason": "tool_use" if any(b.get("type") == "tool_use"
                                             for b in message["content"]) else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        records.append({"parentUuid": parent, "isSidechain": False, "type": role,
                        "message": body, "uuid": record_id, "timestamp": stamp,
                        "userType": "external", "cwd": str(cwd), "sessionId": session_id,
                        "version": VERSION})
        parent = record_id
    return records


def write(records: Sequence[dict[str, Any]], config_dir: Path, cwd: Path,
          session_id: str) -> Path:
    """The transcript written where ``claude --resume session_id`` run in ``cwd`` reads
    it; its path."""
    folder = project_dir(config_dir, cwd)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    with path.open("x", encoding="utf-8") as out:
        out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    return path
