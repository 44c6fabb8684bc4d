"""What the scripted Anthropic server works out from a request: its prompt cache, the
requests the real API always refuses, and the strict ``anthropic_thinking`` mode.

**The prompt cache** (``PromptCache``) follows Anthropic's rules: the prompt is the
sequence tools → system → messages, block by block; a block carrying ``cache_control``
(or the last block, under a top-level ``cache_control``) is a breakpoint. A request
reads the longest prefix, ending at a breakpoint or up to ``LOOKBACK`` blocks before
one, that an earlier request wrote; every breakpoint after that point writes its prefix
(with its TTL) when it holds at least ``min_tokens``. ``cache_control`` itself is not
part of a prefix, and blocks are compared as JSON values (key order aside), so a prefix
"seen before" is the same content, not merely the same bytes. Tokens are counted as
about four characters of each block's JSON. Nothing expires.

**Fields the API does not take** are refused with its 400 as well: a field it does not
have (``BODY_FIELDS``), a thinking object in another shape (OpenCode's ``budgetTokens``),
``temperature`` outside 0 to 1, and beside thinking ``temperature`` other than 1,
``top_k``, or ``top_p`` below 0.95.

**Always refused**, with the API's 400 ``invalid_request_error`` messages: no
``max_tokens``, more than four breakpoints, an empty text block, a ``tool_use`` not
answered in the next message, a ``tool_result`` that answers nothing in the message
before, a thinking budget below 1,024 or not below ``max_tokens``, a final assistant
message (a prefill) whose text ends with whitespace.

**``anthropic_thinking``**: a thinking block must come back exactly as the server sent
it (its text with its signature, a redacted block's data), wherever it is sent; and in
the current assistant turn (the messages after the last user message that is not only
tool results) an assistant message holding a tool call the server made after thinking
must start with that thinking, unmodified and in order, before its text and tool calls.

Internal: ``STRICT_MODES`` is re-exported by ``nonoka.testing.server`` as
``ANTHROPIC_STRICT_MODES``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any

from nonoka.testing.anthropic_replies import AnthropicReply, CacheUsage

STRICT_MODES = ("anthropic_thinking",)
"""The strict modes a ``ScriptedAnthropicServer`` can enforce."""

MAX_BREAKPOINTS = 4
LOOKBACK = 20
"""Blocks before a breakpoint at which a cached prefix is still found."""
MIN_THINKING_BUDGET = 1024
DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"

THINKING_MISSING = (
    "messages.{at}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). "
    "We recommend you include thinking blocks from previous turns. To avoid this "
    "requirement, disable `thinking`. Please consult our documentation at " + DOCS)
THINKING_MODIFIED = (
    "messages.{at}.content.{index}: `thinking` or `redacted_thinking` blocks in the latest "
    "assistant message cannot be modified. These blocks must remain as they were in the "
    "original response.")
SIGNATURE_INVALID = "messages.{at}.content.{index}: Invalid `signature` in `thinking` block"
DATA_INVALID = "messages.{at}.content.{index}: Invalid `data` in `redacted_thinking` block"


def checked_modes(modes: Collection[str]) -> frozenset[str]:
    unknown = sorted(set(modes) - set(STRICT_MODES))
    if unknown:
        raise ValueError(f"unknown strict mode {unknown[0]!r}; use one of "
                         f"{', '.join(STRICT_MODES)}")
    return frozenset(modes)


def _blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("messages")
    return [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []


# -- the prompt cache ------------------------------------------------------------------------


class PromptCache:
    """The prefixes requests wrote, by digest, with their TTL. Owned by one server and
    used under its lock."""

    def __init__(self, min_tokens: int = 1024) -> None:
        self.min_tokens = min_tokens
        self._written: dict[bytes, str] = {}
        self._canonical = Canonical()
        self._chain = PrefixDigests()

    def usage(self, body: Mapping[str, Any]) -> CacheUsage:
        """What ``body`` reads and writes, recording the writes."""
        segments = _segments(body, self._canonical)
        if not segments:
            return CacheUsage(input=0)
        digests, totals = [], []
        total = 0
        for canonical, digest in self._chain.digests(str(body.get("model", "")),
                                                     [c for c, _ in segments]):
            digests.append(digest)
            total += _tokens(canonical)
            totals.append(total)
        marks = [(i, ttl) for i, (_, ttl) in enumerate(segments) if ttl is not None]
        automatic = body.get("cache_control")
        if isinstance(automatic, dict) and segments[-1][1] is None:
            marks.append((len(segments) - 1, _ttl(automatic)))
        hit = -1
        for at, _ in marks:
            for back in range(at, max(-1, at - LOOKBACK - 1), -1):
                if back > hit and digests[back] in self._written:
                    hit = back
                    break
        read = totals[hit] if hit >= 0 else 0
        written = {"5m": 0, "1h": 0}
        done = hit
        for at, ttl in sorted(marks):
            if at <= done or totals[at] < self.min_tokens:
                continue
            self._written[digests[at]] = ttl
            written[ttl] += totals[at] - (totals[done] if done >= 0 else 0)
            done = at
        return CacheUsage(input=total - read - written["5m"] - written["1h"], read=read,
                          write_5m=written["5m"], write_1h=written["1h"])


class Canonical:
    """Each text block's canonical JSON (without its ``cache_control``), kept by where
    it is, its type and its text, so a history sent again is not written out again
    block by block: the double's cost grew with the history, and it is no part of what
    a benchmark measures. Other blocks are written out each time."""

    LIMIT = 1 << 17
    """Blocks kept before the memo starts afresh."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, str], str] = {}

    def __call__(self, where: str, block: Mapping[str, Any]) -> str:
        kind, text = block.get("type"), block.get("text")
        if type(kind) is not str or type(text) is not str \
                or len(block) - ("cache_control" in block) != 2:
            rest = {k: v for k, v in block.items() if k != "cache_control"}
            return json.dumps([where, rest], sort_keys=True)
        key = (where, kind, text)
        found = self._kept.get(key)
        if found is None:
            if len(self._kept) >= self.LIMIT:
                self._kept.clear()
            found = self._kept[key] = json.dumps([where, {"text": text, "type": kind}],
                                                 sort_keys=True)
        return found


class PrefixDigests:
    """The digest of every prefix of a prompt (the model's name, then each block's
    canonical JSON), each kept with its hash state, so a prefix sent before is not
    hashed again: the same digests as hashing the whole prefix each time."""

    LIMIT = 1 << 17

    def __init__(self) -> None:
        self._kept: dict[tuple[bytes, str], tuple[bytes, Any]] = {}
        self._roots: dict[str, tuple[bytes, Any]] = {}

    def digests(self, model: str, canonicals: list[str]) -> list[tuple[str, bytes]]:
        if len(self._kept) >= self.LIMIT:
            self._kept.clear()
        root = self._roots.get(model)
        if root is None:
            state = hashlib.sha256(model.encode())
            root = self._roots[model] = (state.digest(), state)
        (at, state), out = root, []
        for canonical in canonicals:
            key = (at, canonical)
            found = self._kept.get(key)
            if found is None:
                state = state.copy()
                state.update(canonical.encode())
                found = self._kept[key] = (state.digest(), state)
            at, state = found
            out.append((canonical, at))
        return out


def _segments(body: Mapping[str, Any], canonical: Canonical | None = None,
              ) -> list[tuple[str, str | None]]:
    """The prompt's blocks in cache order, each as canonical JSON (without its
    ``cache_control``) with the TTL of the breakpoint it carries, if any."""
    out: list[tuple[str, str | None]] = []

    written = canonical or Canonical()

    def add(where: str, block: Mapping[str, Any]) -> None:
        control = block.get("cache_control")
        out.append((written(where, block),
                    _ttl(control) if isinstance(control, dict) else None))

    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict):
            add("tool", tool)
    for block in _blocks(body.get("system")):
        add("system", block)
    for message in _messages(body):
        for block in _blocks(message.get("content")):
            add(str(message.get("role")), block)
    return out


def _ttl(control: Mapping[str, Any]) -> str:
    return "1h" if control.get("ttl") == "1h" else "5m"


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def counted_input(body: Mapping[str, Any]) -> int:
    """The request's input tokens, counted as the cache counts them."""
    return sum(_tokens(canonical) for canonical, _ in _segments(body))


# -- what the API always refuses ----------------------------------------------------------------


def request_problem(body: Mapping[str, Any]) -> str | None:
    """The message of the 400 the real API answers ``body`` with, or ``None``."""
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            return f"{name}: Field required"
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Input should be a valid integer greater than or equal to 1"
    if not isinstance(body["messages"], list):
        return "messages: Input should be a valid list"
    marks = _breakpoints(body)
    if marks > MAX_BREAKPOINTS:
        return (f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {marks}.")
    return (_fields_problem(body) or _thinking_budget(body, max_tokens)
            or _message_problem(_messages(body)))


BODY_FIELDS = frozenset({
    "model", "messages", "max_tokens", "stream", "system", "tools", "tool_choice",
    "stop_sequences", "temperature", "top_p", "top_k", "thinking", "metadata",
    "service_tier", "output_config", "cache_control", "container", "context_management",
    "mcp_servers", "inference_geo", "speed", "diagnostics", "user_profile_id", "workspace_id"})
"""The body fields the API takes (the SDK's ``MessageCreateParams``, with the beta
``context_management`` and ``mcp_servers``, and the sampling fields): any other is refused."""
THINKING_FIELDS = {"enabled": {"type", "budget_tokens", "display"},
                   "adaptive": {"type", "display"}, "disabled": {"type"}}


def _fields_problem(body: Mapping[str, Any]) -> str | None:
    """Unknown fields, a thinking object in another shape (OpenCode's ``budgetTokens``),
    and sampling the API refuses (out of range, or beside thinking)."""
    for name in body:
        if name not in BODY_FIELDS:
            return f"{name}: Extra inputs are not permitted"
    return _thinking_problem(body.get("thinking")) or _sampling_problem(body)


def _thinking_problem(thinking: object) -> str | None:
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if thinking is not None and kind not in THINKING_FIELDS:
        return "thinking: Input tag does not match any of the expected tags: 'enabled', " \
               "'disabled', 'adaptive'"
    if isinstance(thinking, dict):
        for name in thinking:
            if name not in THINKING_FIELDS[str(kind)]:
                return f"thinking.{kind}.{name}: Extra inputs are not permitted"
        if kind == "enabled" and "budget_tokens" not in thinking:
            return "thinking.enabled.budget_tokens: Field required"
    return None


def _sampling_problem(body: Mapping[str, Any]) -> str | None:
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not 0 <= temperature <= 1:
        return "temperature: Input should be less than or equal to 1" if temperature > 1 \
            else "temperature: Input should be greater than or equal to 0"
    if kind in ("enabled", "adaptive"):
        if temperature is not None and temperature != 1:
            return ("`temperature` may only be set to 1 when thinking is enabled. Please "
                    f"consult our documentation at {DOCS}#feature-compatibility")
        if body.get("top_k") is not None:
            return "`top_k` must be unset when thinking is enabled."
        top_p = body.get("top_p")
        if isinstance(top_p, int | float) and top_p < 0.95:
            return "`top_p` must be greater than or equal to 0.95 or unset when thinking " \
                   "is enabled."
    return None


def _breakpoints(body: Mapping[str, Any]) -> int:
    count = int(isinstance(body.get("cache_control"), dict))
    tools = body.get("tools")
    blocks: list[Any] = list(tools) if isinstance(tools, list) else []
    blocks += _blocks(body.get("system"))
    count += sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))
    for message in _messages(body):
        for block in _blocks(message.get("content")):
            if block.get("cache_control"):
                count += 1
            if block.get("type") == "tool_result":
                count += sum(1 for b in _blocks(block.get("content"))
                             if b.get("cache_control"))
    return count


def _thinking_budget(body: Mapping[str, Any], max_tokens: int) -> str | None:
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
        return ("thinking.enabled.budget_tokens: Input should be greater than or equal to "
                f"{MIN_THINKING_BUDGET}")
    if budget >= max_tokens:
        return "`max_tokens` must be greater than `thinking.budget_tokens`."
    return None


def _message_problem(messages: list[dict[str, Any]]) -> str | None:
    previous_calls: set[str] = set()
    for at, message in enumerate(messages):
        blocks = _blocks(message.get("content"))
        calls = False
        for index, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "text" and not block.get("text"):
                return f"messages.{at}.content.{index}.text: text content blocks must be non-empty"
            calls = calls or kind in ("tool_result", "tool_use")
        if not calls and not previous_calls:
            continue  # no tool call asked or answered here: nothing more to check
        answered = [str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"]
        stray = [i for i in answered if i not in previous_calls]
        if stray:
            index = next(i for i, b in enumerate(blocks) if b.get("type") == "tool_result"
                         and str(b.get("tool_use_id")) == stray[0])
            return (f"messages.{at}.content.{index}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {stray[0]}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message.")
        missing = [i for i in previous_calls if i not in answered]
        if missing:
            return (f"messages.{at - 1}: `tool_use` ids were found without `tool_result` "
                    f"blocks immediately after: {', '.join(sorted(missing))}. Each `tool_use` "
                    "block must have a corresponding `tool_result` block in the next message.")
        previous_calls = {str(b.get("id")) for b in blocks if b.get("type") == "tool_use"}
    final = _blocks(messages[-1].get("content")) if messages else []
    if messages and messages[-1].get("role") == "assistant" and final:
        text = str(final[-1].get("text")) if final[-1].get("type") == "text" else ""
        if text != text.rstrip():
            return "messages: final assistant content cannot end with trailing whitespace"
    return None


# -- strict: thinking comes back as it was sent ------------------------------------------------


class ProducedThinking:
    """The thinking the server sent: each signature with its text, each redacted block's
    data, and the thinking blocks that came before each tool call. Owned by one server
    and used under its lock."""

    def __init__(self) -> None:
        self.signatures: dict[str, str] = {}
        self.redacted: set[str] = set()
        self.before_call: dict[str, list[dict[str, Any]]] = {}

    def note(self, reply: AnthropicReply) -> None:
        blocks = [t.block() for t in reply.thinking]
        for block in blocks:
            if block["type"] == "thinking":
                self.signatures[block["signature"]] = block["thinking"]
            else:
                self.redacted.add(block["data"])
        if blocks:
            for call in reply.tool_calls:
                self.before_call[call.id] = blocks

    def refusal(self, body: Mapping[str, Any]) -> str | None:
        """The 400 message for thinking that came back altered or went missing."""
        messages = _messages(body)
        turn = _turn_start(messages)
        for at, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            blocks = _blocks(message.get("content"))
            for index, block in enumerate(blocks):
                problem = self._forged(block)
                if problem is not None:
                    template = THINKING_MODIFIED if at >= turn else problem
                    return template.format(at=at, index=index)
            if at >= turn:
                problem = self._missing(at, blocks)
                if problem is not None:
                    return problem
        return None

    def _forged(self, block: Mapping[str, Any]) -> str | None:
        kind = block.get("type")
        if kind == "thinking":
            known = self.signatures.get(str(block.get("signature")))
            return None if known is not None and known == block.get("thinking") \
                else SIGNATURE_INVALID
        if kind == "redacted_thinking":
            return None if block.get("data") in self.redacted else DATA_INVALID
        return None

    def _missing(self, at: int, blocks: list[dict[str, Any]]) -> str | None:
        for block in blocks:
            if block.get("type") != "tool_use":
                continue
            expected = self.before_call.get(str(block.get("id")))
            if expected is None:
                continue
            sent = blocks[:len(expected)]
            if [b.get("type") for b in sent] != [b["type"] for b in expected]:
                found = blocks[0].get("type") if blocks else "nothing"
                if found in ("thinking", "redacted_thinking"):
                    return THINKING_MODIFIED.format(at=at, index=0)
                return THINKING_MISSING.format(at=at, found=found)
            for index, (got, want) in enumerate(zip(sent, expected, strict=True)):
                if got != want:
                    return THINKING_MODIFIED.format(at=at, index=index)
        return None


def _turn_start(messages: list[dict[str, Any]]) -> int:
    """Where the current assistant turn starts: after the last user message that holds
    more than tool results."""
    start = 0
    for at, message in enumerate(messages):
        if message.get("role") == "user" and any(
                b.get("type") != "tool_result" for b in _blocks(message.get("content"))):
            start = at + 1
    return start
