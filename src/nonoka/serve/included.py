"""A request's ``include``: the values the Responses API documents, and whose each is.

``reasoning.encrypted_content`` is nonoka's own (``nonoka.serve.reasoning``), as are
``message.input_image.image_url`` and ``computer_call_output.output.image_url``: stored
inputs keep their images, which their items always give by URL or inline, but for an
image sent by ``file_id``, whose ``image_url`` only the include fills
(``with_image_urls``). The others ask the upstream
for more of its hosted tools' items (``UPSTREAM``) and go to an ``openai-responses:``
model as given; the items come back whole and are stored so. Any other value is
OpenAI's 400 (``invalid_value``, naming the supported ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nonoka.serve.errors import invalid
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import FilePart

INCLUDABLE = ("code_interpreter_call.outputs", "computer_call_output.output.image_url",
              "file_search_call.results", "message.input_image.image_url",
              "message.output_text.logprobs", "reasoning.encrypted_content",
              "web_search_call.action.sources", "web_search_call.results")
"""Every value ``include`` takes (the ``openai`` SDK's ``ResponseIncludable``)."""
UPSTREAM = frozenset({"code_interpreter_call.outputs", "file_search_call.results",
                      "message.output_text.logprobs", "web_search_call.action.sources",
                      "web_search_call.results"})
"""The values the upstream answers."""
IMAGE_URLS = "message.input_image.image_url"


def included(value: Any, param: str) -> tuple[str, ...]:
    """``include`` checked (``None``: nothing asked), or OpenAI's 400."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise invalid("include must be a list of strings", param)
    for n, given in enumerate(value):
        if given not in INCLUDABLE:
            listed = ", ".join(f"'{v}'" for v in INCLUDABLE[:-1])
            raise invalid(f"Invalid value: {given!r}. Supported values are: {listed}, and "
                          f"'{INCLUDABLE[-1]}'.", f"{param}[{n}]", code="invalid_value")
    return tuple(dict.fromkeys(value))


def upstream(values: Sequence[str]) -> list[str]:
    """The values an ``openai-responses:`` upstream is asked for."""
    return [v for v in values if v in UPSTREAM]


def query_include(query: Mapping[str, str]) -> list[str]:
    """``include`` as a ``GET``'s query gives it: ``include[]=…`` (as the ``openai``
    SDK sends it) or ``include=…``, each possibly repeated."""
    getlist = getattr(query, "getlist", None)
    if getlist is None:
        return [v for k, v in query.items() if k in ("include", "include[]")]
    return [*getlist("include[]"), *getlist("include")]


def with_image_urls(item: dict[str, Any], entry: MemoryEntry) -> dict[str, Any]:
    """A stored message's item with the ``image_url`` of each image it was sent by
    ``file_id`` (the stored bytes, as a data URL), as ``include`` asks."""
    content = item.get("content")
    parts = entry.parts or []
    if item.get("type") != "message" or not isinstance(content, list) or \
            len(content) != len(parts):
        return item
    filled = []
    for wired, part in zip(content, parts, strict=True):
        if isinstance(wired, dict) and wired.get("type") == "input_image" and \
                wired.get("image_url") is None and isinstance(part, FilePart):
            source = part.url if part.data is None else \
                f"data:{part.media_type};base64,{part.data}"
            wired = {**wired, "image_url": source}
        filled.append(wired)
    return {**item, "content": filled}
