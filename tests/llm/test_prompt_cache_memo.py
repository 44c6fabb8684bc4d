"""The scripted Anthropic server's prompt cache keeps each text block's canonical JSON
and each prefix's digest between requests: what it keeps must be what it would work out
afresh, or a cache read would be counted for a prefix never written."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from nonoka.testing.anthropic_checks import Canonical, PrefixDigests, PromptCache

BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "naïve café"},
    {"text": "naïve café", "type": "text"},
    {"type": "text", "text": "naïve café", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "naïve café", "citations": "x"},
    {"type": "text", "text": 5},
    {"type": "tool_use", "id": "t1", "name": "f", "input": {"b": 1, "a": [2]}},
]


def test_a_kept_block_is_written_as_it_would_be_afresh() -> None:
    canonical = Canonical()
    for _ in range(2):  # the second time from what was kept
        for where in ("user", "assistant"):
            for block in BLOCKS:
                rest = {k: v for k, v in block.items() if k != "cache_control"}
                assert canonical(where, block) == json.dumps([where, rest], sort_keys=True)


def test_a_kept_prefix_has_the_digest_of_the_whole_prefix() -> None:
    chain = PrefixDigests()
    texts = [json.dumps(["user", {"text": str(n), "type": "text"}]) for n in range(6)]
    for model, sent in (("m", texts), ("m", texts[:3] + texts[4:]), ("other", texts),
                        ("m", texts)):
        got = chain.digests(model, sent)
        for at, (text, digest) in enumerate(got):
            whole = hashlib.sha256((model + "".join(sent[:at + 1])).encode()).digest()
            assert (text, digest) == (sent[at], whole)


def test_a_history_sent_again_reads_what_it_wrote() -> None:
    cache = PromptCache(min_tokens=1)
    messages: list[dict[str, Any]] = []
    usages = []
    for n in range(3):
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"question {n}", "cache_control": {"type": "ephemeral"}}]})
        usages.append(cache.usage({"model": "m", "messages": messages}))
        messages[-1] = {"role": "user", "content": f"question {n}"}
        messages.append({"role": "assistant", "content": "answer"})
    assert usages[0].read == 0 and usages[0].write_5m > 0
    assert usages[1].read == usages[0].write_5m
    assert usages[2].read == usages[1].read + usages[1].write_5m
