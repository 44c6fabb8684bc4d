"""Stored entries as the Responses API's items, and content parts both ways.

One entry gives the items a client sees of it, each with an id made from where it is
stored (``nonoka.serve.ids``): an assistant entry its reasoning, its message (or
messages), its hosted tools' items and its function calls, in the order the upstream
gave them; a tool entry the output of the call it answers; a user or system entry
its message (or the ``additional_tools`` item it keeps). The same function builds the
items a stream ends with, ``GET`` returns and ``input_items`` lists, so they agree.

Reasoning text is given as a reasoning item's summary: that is where OpenAI's own
reasoning reaches its clients (and what Codex and the AI SDK show); the provider's
opaque reasoning (signatures, encrypted content) stays in the session and goes back to
the provider, never to the client.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from collections.abc import Mapping
from typing import Any

from nonoka.llm.responses import CUSTOM_CALL, OPENAI_RESPONSES
from nonoka.llm.responses_builtin import builtin_item, output_item
from nonoka.serve.additional import carried_item
from nonoka.serve.errors import invalid
from nonoka.serve.file_inputs import file_id_of, stored_part
from nonoka.serve.hosted import CUSTOM_OUTPUT, custom_call
from nonoka.serve.ids import (
    ENTRY_MESSAGE,
    ENTRY_OUTPUT,
    ENTRY_REASONING,
    FIRST_CALL,
    LATER_MESSAGE,
    ResponsePoint,
)
from nonoka.serve.reasoning import sealed
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import FilePart, Part, TextPart, ToolCall


def entry_items(entry: MemoryEntry, point: ResponsePoint, offset: int,
                sealed_reasoning: bool = False, custom: Mapping[str, str] | None = None
                ) -> list[dict[str, Any]]:
    """The items of ``entry``, stored ``offset`` entries after ``point``'s start;
    ``sealed_reasoning``: with the reasoning's ``encrypted_content``; ``custom``: the
    custom and built-in tools' calls (``nonoka.serve.hosted.client_calls``), whose
    outputs are ``custom_tool_call_output`` items or the built-in tool's own."""
    if entry.role == "assistant":
        return assistant_items(entry.content, entry.tool_calls, reasoning_text(entry),
                               point, offset, sealed=sealed(entry.reasoning)
                               if sealed_reasoning and entry.reasoning else None,
                               provider=entry.metadata.get("provider_metadata"))
    if entry.role == "tool":
        item_id = point.item_id("fco_", offset, ENTRY_OUTPUT)
        call_id = entry.tool_call_id or ""
        kind = (custom or {}).get(call_id)
        if kind is not None and kind != CUSTOM_CALL:
            made = output_item(kind, call_id, entry.content)
            if made["type"] == "shell_call_output":  # a listed one always has a status
                made = {**made, "status": made.get("status") or "completed"}
            return [made if "id" in made else {**made, "id": item_id}]
        item = call_output_item(item_id, call_id, entry.content, entry.parts)
        if kind == CUSTOM_CALL:
            item["type"] = CUSTOM_OUTPUT
        return [item]
    kept = carried_item(entry.metadata.get("provider_metadata")) \
        if entry.role == "system" and entry.metadata else None
    if kept is not None:
        return [{**kept, "id": point.item_id("msg_", offset, ENTRY_MESSAGE)}]
    role = "system" if entry.role == "system" else "user"
    return [{"type": "message", "id": point.item_id("msg_", offset, ENTRY_MESSAGE),
             "role": role, "status": "completed",
             "content": input_content(entry.content, entry.parts)}]


def reasoning_text(entry: MemoryEntry) -> str:
    return "".join(part.text for part in entry.reasoning)


def assistant_items(text: str, calls: list[ToolCall], reasoning: str, point: ResponsePoint,
                    offset: int, status: str = "completed", sealed: str | None = None,
                    provider: Any = None) -> list[dict[str, Any]]:
    """An answer's items: its reasoning, its message (always, unless it only calls
    tools or hosted tools), the items of the hosted tools it ran (as the upstream gave
    them), its function and custom tools' calls. In the order the upstream gave them
    when its ``provider`` metadata keeps it (a search, then the message citing it; a
    message the upstream split around a search is two), else in that order.
    ``sealed``: the reasoning's ``encrypted_content`` (``nonoka.serve.reasoning``),
    given even without text."""
    thought = [reasoning_item(point.item_id("rs_", offset, ENTRY_REASONING),
                              reasoning or None, sealed)] if reasoning or sealed else []
    called = [call_item(point.item_id("fc_", offset, FIRST_CALL + n), call)
              for n, call in enumerate(calls)]
    layout = answer_layout(provider)
    messages = [e for e in layout if e.get("type") == "message"]
    placed: list[dict[str, Any]] = []
    hosted = False
    for entry in layout:
        kind = entry.get("type")
        if kind == "reasoning" and thought:
            placed.append(thought.pop())
        elif kind == "function_call" and called:
            placed.append(called.pop(0))
        elif isinstance(entry.get("item"), dict):
            placed.append(dict(entry["item"]))  # a hosted tool's, as the upstream made it
            hosted = True
        elif kind == "message":
            said = text if len(messages) == 1 else str(entry.get("text", ""))
            message = message_item(message_id(point, offset, len(
                [i for i in placed if i["type"] == "message"])), said, status)
            content = entry.get("content")
            if isinstance(content, list) and status == "completed":
                message["content"] = list(content)  # with its citations, its logprobs
            placed.append(message)
    if not messages and (text or not (calls or hosted)):
        placed.append(message_item(message_id(point, offset, 0), text, status))
    return [*thought, *placed, *called]  # what the layout did not place, where it goes


def answer_layout(provider: Any) -> list[dict[str, Any]]:
    """The answer's items in the upstream's order, as its adapter kept them (empty for
    an answer of another upstream)."""
    own = provider.get(OPENAI_RESPONSES) if isinstance(provider, dict) else None
    layout = own.get("items") if isinstance(own, dict) else None
    return [e for e in layout if isinstance(e, dict)] if isinstance(layout, list) else []


def message_id(point: ResponsePoint, offset: int, number: int) -> str:
    """The id of an answer's message ``number`` (0: its first, most often its only)."""
    return point.item_id("msg_", offset,
                         ENTRY_MESSAGE if number == 0 else LATER_MESSAGE + number)


def message_item(item_id: str, text: str | None, status: str = "completed"
                 ) -> dict[str, Any]:
    """An assistant message; ``text`` ``None``: as it is announced, before any text."""
    content = [] if text is None else [output_text(text)]
    return {"type": "message", "id": item_id, "role": "assistant", "status": status,
            "content": content}


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item_id: str, text: str | None, sealed: str | None = None
                   ) -> dict[str, Any]:
    summary = [] if text is None else [summary_text(text)]
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": summary}
    if sealed is not None:
        item["encrypted_content"] = sealed
    return item


def summary_text(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def call_item(item_id: str, call: ToolCall, status: str = "completed") -> dict[str, Any]:
    """A function call, or a custom tool's call (its ``input``), with the ``namespace``
    of a namespace's tool."""
    whole = builtin_item(call.provider_metadata)
    if whole is not None:  # a built-in tool's call, as the upstream (or client) gave it
        return {**whole, "id": item_id}
    own = (call.provider_metadata or {}).get(OPENAI_RESPONSES)
    namespace = own.get("namespace") if isinstance(own, dict) else None
    extra = {"namespace": namespace} if isinstance(namespace, str) else {}
    if custom_call(call.provider_metadata):
        return {"type": "custom_tool_call", "id": item_id, "call_id": call.id,
                "name": call.name, "input": call.arguments, **extra}
    return {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name,
            "arguments": call.arguments, "status": status, **extra}


def call_output_item(item_id: str, call_id: str, text: str,
                     parts: list[TextPart | FilePart] | None) -> dict[str, Any]:
    output: str | list[dict[str, Any]] = input_content(text, parts) if parts else text
    return {"type": "function_call_output", "id": item_id, "call_id": call_id,
            "output": output, "status": "completed"}


def input_content(text: str, parts: list[TextPart | FilePart] | None) -> list[dict[str, Any]]:
    """A stored message's content as input parts."""
    if not parts:
        return [{"type": "input_text", "text": text}]
    return [_input_part(part) for part in parts]


def _input_part(part: TextPart | FilePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    file_id = file_id_of(part)
    if file_id is not None:  # an uploaded file: named as the client named it
        if part.media_type.startswith("image/"):
            return {"type": "input_image", "file_id": file_id, "image_url": None,
                    "detail": "auto"}
        return {"type": "input_file", "file_id": file_id, "filename": part.filename}
    source = part.url if part.data is None else f"data:{part.media_type};base64,{part.data}"
    if part.media_type.startswith("image/"):
        return {"type": "input_image", "image_url": source, "detail": "auto"}
    wired: dict[str, Any] = {"type": "input_file", "filename": part.filename}
    if part.data is None:
        wired["file_url"] = part.url
    else:
        wired["file_data"] = source
    return wired


# -- content parts a client sends ------------------------------------------------------


def content_of(content: Any, param: str) -> tuple[str, list[Part] | None]:
    """A message's text and, when it is more than one text, its parts."""
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        raise invalid("a message's content must be a string or a list of content parts",
                      param)
    parts = [content_part(part, f"{param}[{n}]") for n, part in enumerate(content)]
    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return text, None
    return text, parts


def content_part(part: Any, param: str) -> Part:
    """One content part: text (``input_text``, ``output_text``, ``refusal``, Chat's
    ``text``), an image (``input_image``, Chat's ``image_url``) or a file
    (``input_file``, Chat's ``file``)."""
    if not isinstance(part, dict):
        raise invalid("a content part must be an object", param)
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return TextPart(text=_string(part.get("text"), f"{param}.text"))
    if kind == "refusal":
        return TextPart(text=_string(part.get("refusal"), f"{param}.refusal"))
    if kind == "input_image":
        return image_part(part.get("image_url"), part.get("file_id"), param)
    if kind == "image_url":
        url = part.get("image_url")
        return image_part(url.get("url") if isinstance(url, dict) else url, None, param)
    if kind == "input_file":
        return file_part(part.get("file_data"), part.get("file_url"), part.get("filename"),
                         part.get("file_id"), param)
    if kind == "file":
        found = part.get("file")
        inner: dict[str, Any] = found if isinstance(found, dict) else {}
        return file_part(inner.get("file_data"), None, inner.get("filename"),
                         inner.get("file_id"), f"{param}.file")
    raise invalid(f"content part type {kind!r} is not supported", f"{param}.type")


def image_part(url: Any, file_id: Any, param: str) -> FilePart:
    """An image part (``param``: the part's own place): by ``file_id``, a data URL or a
    link."""
    if file_id is not None:
        return stored_part(file_id, f"{param}.file_id", image=True)
    param = f"{param}.image_url"
    url = _string(url, param)
    if url.startswith("data:"):
        media_type, data = _data_url(url, param)
        return FilePart(media_type=media_type, data=data)
    guessed = mimetypes.guess_type(url.split("?", 1)[0])[0]
    return FilePart(media_type=guessed if guessed and guessed.startswith("image/")
                    else "image/*", url=url)


def file_part(data: Any, url: Any, filename: Any, file_id: Any, param: str) -> FilePart:
    if file_id is not None:
        return stored_part(file_id, f"{param}.file_id")
    name = filename if isinstance(filename, str) and filename else None
    if data is not None:
        text = _string(data, f"{param}.file_data")
        if text.startswith("data:"):
            media_type, encoded = _data_url(text, f"{param}.file_data")
        else:
            media_type, encoded = _guess(name), _base64(text, f"{param}.file_data")
        return FilePart(media_type=media_type, data=encoded, filename=name)
    if url is not None:
        link = _string(url, f"{param}.file_url")
        return FilePart(media_type=_guess(name or link.split("?", 1)[0]), url=link,
                        filename=name)
    raise invalid("a file needs file_id, file_data or file_url", param)


def _guess(name: str | None) -> str:
    found = mimetypes.guess_type(name)[0] if name else None
    return found or "application/octet-stream"


def _data_url(url: str, param: str) -> tuple[str, str]:
    """``data:image/png;base64,AAAA`` → ``("image/png", "AAAA")``."""
    head, comma, data = url.partition(",")
    if not comma or not head.endswith(";base64"):
        raise invalid("a data URL must be base64 (data:<type>;base64,...)", param)
    media_type = head[len("data:"):-len(";base64")] or "application/octet-stream"
    return media_type, _base64(data, param)


def _base64(data: str, param: str) -> str:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid("the file's data is not valid base64", param) from None
    return data


def _string(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise invalid(f"{param} must be a string", param)
    return value
