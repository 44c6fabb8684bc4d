"""A request line that resends the last one's messages decodes as ``json.loads`` does.

From its second line on, a bridge decodes a line's top level itself and takes the
messages the last line's array already held without decoding them again
(``nonoka.protocol.frames._decode``). These tests hold the result to ``json.loads`` on
generated histories that grow, shrink, change and are written with odd spacing, and
check that the shortcut is really taken (the earlier message objects are reused).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonoka.protocol import frames
from nonoka.protocol.frames import ProtocolError, check_request_frame

_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                          allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8)
_MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]),
                           "content": _TEXT}),
    _VALUE)  # whatever a host sends: the decoding must match json.loads all the same
_SPACE = st.sampled_from(["", " ", "\n", " \t ", "\r\n"])


def _line(messages: list[Any], extra: dict[str, Any], space: str, first: bool) -> str:
    """A request line with ``messages``, other keys before or after them, and ``space``
    around every separator."""
    parts = [(k, v) for k, v in extra.items() if k != "messages"]
    items = [(json.dumps(k), json.dumps(v)) for k, v in parts]
    array = "[" + space + ("," + space).join(json.dumps(m) for m in messages) + space + "]"
    at = 0 if first else len(items)
    items.insert(at, ('"messages"', array))
    body = ("," + space).join(f"{k}{space}:{space}{v}" for k, v in items)
    return "{" + space + body + space + "}" + space


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(_MESSAGE, max_size=4), st.integers(0, 6),
                          st.dictionaries(st.sampled_from(["type", "cwd", "tools", "x"]),
                                          _VALUE, max_size=3),
                          _SPACE, st.booleans()), min_size=1, max_size=6))
def test_each_line_decodes_as_json_loads_does(steps: list[Any]) -> None:
    history: list[Any] = []
    lines = frames.RequestLines()
    for added, dropped, extra, space, first in steps:
        history = history[:max(0, len(history) - dropped)] if dropped > 4 else history
        history = [*history, *added]
        text = _line(history, extra, space, first)
        assert frames._decode(text, lines) == json.loads(text)
        assert frames._decode(text, None) == json.loads(text)


def _chat(messages: list[dict[str, str]], request_id: str) -> bytes:
    return json.dumps({"type": "chat", "protocol": {"version": "1"}, "request_id": request_id,
                       "messages": messages, "cwd": "/tmp"}).encode() + b"\n"


def test_a_resent_history_is_not_decoded_again() -> None:
    """The messages a line shares with the one before are the earlier line's objects;
    only the new ones are decoded (what keeps a long-lived bridge's turn flat)."""
    history = [{"role": "user", "content": f"question {i}"} for i in range(100)]
    lines = frames.RequestLines()
    check_request_frame(_chat(history[:1], "a"), lines=lines)  # a process's first line
    first = check_request_frame(_chat(history[:50], "b"), lines=lines)["messages"]
    second = check_request_frame(_chat(history[:52], "c"), lines=lines)["messages"]
    assert second == history[:52]
    assert all(a is b for a, b in zip(first, second, strict=False))
    third = check_request_frame(_chat([{"role": "user", "content": "other"}], "d"),
                                lines=lines)["messages"]
    assert third == [{"role": "user", "content": "other"}]
    unkept = check_request_frame(_chat(history[:52], "e"))["messages"]  # no RequestLines
    assert unkept == history[:52] and not any(
        a is b for a, b in zip(first, unkept, strict=False))


@pytest.mark.parametrize("tail", [
    ', ' + "9" * 5000 + ']}', ', NaN]}', ', {"role": "user", "content": "x"}',
    ', {"role": "user", "content": "x"}]} trailing', ', ' + "[" * 200 + "]" * 200 + "]}"])
def test_a_bad_line_after_a_good_one_is_refused_as_before(tail: str) -> None:
    """Errors in the part decoded afresh are ``json.loads``'s (or the nesting limit's),
    not the shortcut's."""
    history = [{"role": "user", "content": f"q{i}"} for i in range(10)]
    good = '{"type": "chat", "protocol": {"version": "1"}, "messages": ' + json.dumps(history)
    lines = frames.RequestLines()
    check_request_frame((good + "}").encode(), lines=lines)
    check_request_frame((good + "}").encode(), lines=lines)
    bad = good[:-1] + tail
    with pytest.raises(ProtocolError) as caught:
        check_request_frame(bad.encode(), lines=lines)
    with pytest.raises(ProtocolError) as fresh:
        check_request_frame(bad.encode())
    assert (caught.value.code, caught.value.details, caught.value.message) == (
        fresh.value.code, fresh.value.details, fresh.value.message)


def test_a_spaced_array_is_reused_too() -> None:
    """Whitespace before the closing bracket does not stop the next line's reuse."""
    history: list[Any] = [{"role": "user", "content": f"q{i}"} for i in range(20)]
    lines = frames.RequestLines()
    frames._decode(_line(history[:1], {}, " ", True), lines)
    first = frames._decode(_line(history[:10], {"type": "chat"}, " \n", True), lines)["messages"]
    second = frames._decode(_line(history[:15], {"type": "chat"}, " \n", True),
                            lines)["messages"]
    third = frames._decode(_line(history, {"type": "chat"}, " \n", True), lines)["messages"]
    assert second == history[:15] and third == history
    assert all(a is b for a, b in zip(first, second[:10], strict=True))
    assert all(a is b for a, b in zip(second, third[:15], strict=True))
