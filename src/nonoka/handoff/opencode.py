"""A conversation as an OpenCode session export, so ``opencode import FILE`` and then
``opencode --session ID`` (or ``opencode run --session ID``) hold it.

OpenCode keeps a session as messages made of parts, and its ``export`` / ``import``
commands move one as JSON: ``{"info": session, "messages": [{"info", "parts"}]}``. A
user message's parts are texts and files (an image or PDF as a ``data:`` URL); an
assistant message is one model step: its reasoning, its text, and each tool call as a
``tool`` part that also holds the call's result (``state.output``, its images as
``state.attachments``), so a stored tool entry becomes the ``tool`` part of the call it
answers. Ids are made as OpenCode makes them (a prefix, then a time-ordered hex and a
random tail), so the messages keep their order and OpenCode's next ones sort after.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from nonoka.handoff.conversation import calls_of, carried
from nonoka.state.entries import MemoryEntry

VERSION = "1.18.33"
"""The OpenCode release whose export format this writes."""
_BASE62 = string.digits + string.ascii_letters


class Ids:
    """OpenCode's ascending ids: ``prefix_`` + 12 hex digits of the time in milliseconds
    (times 4096, plus a counter) + 14 random base-62 characters."""

    def __init__(self, now: datetime) -> None:
        self._ms = int(now.timestamp() * 1000)
        self._count = 0

    def next(self, prefix: str) -> str:
        self._count += 1
        value = (self._ms * 0x1000 + self._count) & 0xFFFFFFFFFFFF
        tail = "".join(secrets.choice(_BASE62) for _ in range(14))
        return f"{prefix}_{value:012x}{tail}"


def session_id(now: datetime) -> str:
    """A new OpenCode session id."""
    return Ids(now).next("ses")


def _file_part(part: dict[str, Any]) -> dict[str, Any]:
    media_type = str(part.get("media_type") or "application/octet-stream")
    data, url = part.get("data"), part.get("url")
    link = f"data:{media_type};base64,{data}" if data is not None else str(url)
    out = {"type": "file", "mime": media_type, "url": link}
    if part.get("filename"):
        out["filename"] = str(part["filename"])
    return out


def _user_parts(entry: MemoryEntry) -> list[dict[str, Any]]:
    parts = entry.metadata.get("parts")
    if not isinstance(parts, list) or not parts:
        return [{"type": "text", "text": entry.content}] if entry.content else []
    out: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            out.append({"type": "text", "text": str(part.get("text", ""))})
        else:
            out.append(_file_part(part))
    return out


def _result(entry: MemoryEntry | None, now_ms: int) -> dict[str, Any]:
    """A ``tool`` part's state: the result the call got (an error stays an error)."""
    if entry is None:
        return {"status": "error", "error": "no result was stored for this call",
                "time": {"start": now_ms, "end": now_ms}}
    parts = entry.metadata.get("parts")
    files = [_file_part(p) for p in parts or () if isinstance(p, dict)
             and p.get("type") == "file"] if isinstance(parts, list) else []
    if entry.metadata.get("is_error"):
        return {"status": "error", "error": entry.content,
                "time": {"start": now_ms, "end": now_ms}}
    state: dict[str, Any] = {"status": "completed", "output": entry.content, "title": "",
                             "metadata": {}, "time": {"start": now_ms, "end": now_ms}}
    if files:
        state["attachments"] = files
    return state


def _arguments(text: Any) -> Any:
    try:
        value = json.loads(str(text or "{}"))
    except ValueError:
        return {"input": str(text)}
    return value if isinstance(value, dict) else {"input": value}


def export(entries: Sequence[MemoryEntry], sid: str, cwd: Path, now: datetime,
           title: str = "") -> dict[str, Any]:
    """The session as ``opencode export`` gives one (and ``opencode import`` takes)."""
    ids = Ids(now)
    now_ms = int(now.timestamp() * 1000)
    kept = carried(entries)
    results = {str(e.metadata.get("tool_call_id")): e for e in kept if e.role == "tool"}
    messages: list[dict[str, Any]] = []
    parent = ""

    def message(info: dict[str, Any], parts: list[dict[str, Any]]) -> None:
        mid = ids.next("msg")

        def owned(part: dict[str, Any]) -> dict[str, Any]:
            return {"id": ids.next("prt"), "sessionID": sid, "messageID": mid, **part}

        for part in parts:
            state = part.get("state")
            if isinstance(state, dict) and state.get("attachments"):
                state["attachments"] = [owned(a) for a in state["attachments"]]
        messages.append({"info": {"id": mid, "sessionID": sid, **info},
                         "parts": [owned(p) for p in parts]})

    for entry in kept:
        if entry.role == "user":
            parts = _user_parts(entry)
            if not parts:
                continue
            message({"role": "user", "time": {"created": now_ms}, "agent": "build",
                     "model": {"providerID": "nonoka", "modelID": "default"}}, parts)
            parent = messages[-1]["info"]["id"]
        elif entry.role == "assistant":
            steps: list[dict[str, Any]] = [
                {"type": "reasoning", "text": str(r.get("text", "")),
                 "time": {"start": now_ms, "end": now_ms}}
                for r in entry.metadata.get("reasoning") or () if isinstance(r, dict)
                and r.get("text")]
            if entry.content:
                steps.append({"type": "text", "text": entry.content})
            calls = calls_of(entry)
            steps.extend({"type": "tool", "tool": str(c.get("name")),
                          "callID": str(c.get("id")),
                          "state": {"input": _arguments(c.get("arguments")),
                                    **_result(results.get(str(c.get("id"))), now_ms)}}
                         for c in calls)
            message({"role": "assistant", "parentID": parent, "mode": "build",
                     "agent": "build", "path": {"cwd": str(cwd), "root": str(cwd)},
                     "cost": 0, "tokens": {"input": 0, "output": 0, "reasoning": 0,
                                           "cache": {"read": 0, "write": 0}},
                     "modelID": "default", "providerID": "nonoka",
                     "time": {"created": now_ms, "completed": now_ms},
                     "finish": "tool-calls" if calls else "stop"}, steps)
    return {"info": {"id": sid, "slug": "handed-off", "projectID": "global",
                     "directory": str(cwd), "title": title or "handed off from nonoka",
                     "version": VERSION, "time": {"created": now_ms, "updated": now_ms}},
            "messages": messages}


def write(data: dict[str, Any], folder: Path) -> Path:
    """The export written for ``opencode import``; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{data['info']['id']}.json"
    with path.open("x", encoding="utf-8") as out:
        json.dump(data, out, ensure_ascii=False)
    return path
