"""What Anthropic's prompt cache saves a long tool session, and how stable its requests are.

A 50-step ReAct session (49 tool calls, each after a signed thinking block, then the
answer) with a ~30,000-token prefix (a long system prompt and eight tools with long
descriptions) runs twice through the ``Runner`` and the real ``anthropic:`` adapter
against ``ScriptedAnthropicServer``, which counts tokens (about four characters a token)
and keeps a prompt cache by Anthropic's rules (a prefix is read where an earlier request
wrote it at a breakpoint; 1,024 tokens at least): once with the default breakpoints
(five-minute TTL), once with ``prompt_cache = "off"``. Both are priced at
``anthropic:claude-sonnet-4-5``'s catalog rates (input, output, cache read, five-minute
write).

Goals:

1. the cached session costs at most 0.25 of the uncached one;
2. every request's bytes are identical to the previous request's for at least 99 % of
   its length (the common prefix of the two bodies, over the later body's length),
   across the 49 steps after the first.

Also reported: the common prefix once the cache marks are left out of both bodies
(content only: nothing stored is ever re-encoded, so each request is the previous one
plus the new exchange). Run: ``.venv/bin/python bench/caching.py [--steps N]``;
prints a PASS/FAIL line per goal (exit status 1 on a FAIL).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from nonoka import Agent, Runner, tool
from nonoka.llm.anthropic import AnthropicChatModel
from nonoka.llm.catalog import cost, known_model
from nonoka.state.messages import ToolCall
from nonoka.store.sqlite import SQLiteCheckpointStore
from nonoka.testing.server import AnthropicReply, ScriptedAnthropicServer, Thinking

MODEL = "anthropic:claude-sonnet-4-5"
COST_RATIO = 0.25
SHARE = 0.99
MARK = re.compile(rb', "cache_control": \{[^}]*\}')

WORDS = ["the", "service", "reads", "each", "request,", "checks", "its", "budget,", "writes",
         "its", "journal", "entry", "and", "answers", "within", "the", "limits", "the",
         "operator", "set", "for", "the", "project;"]


def prose(seed: int, chars: int) -> str:
    """Deterministic text of about ``chars`` characters."""
    out: list[str] = []
    at, size = seed, 0
    while size < chars:
        word = WORDS[at % len(WORDS)] + ("." if at % 17 == 0 else "")
        out.append(word)
        size += len(word) + 1
        at = at * 31 + 7
    return " ".join(out)


def make_tool(index: int) -> Any:
    description = f"Tool {index}: " + prose(index, 2_400)

    def run(query: str) -> str:
        return f"tool {index} found for {query!r}: " + prose(len(query) + index, 90)

    run.__name__ = f"tool_{index}"
    run.__doc__ = f"{description}\n\nArgs:\n    query: what to look up\n"
    return tool(idempotent=True)(run)


def script(steps: int, tools: int) -> list[AnthropicReply]:
    replies = [AnthropicReply(
        thinking=(Thinking(f"Step {i}: " + prose(i, 50)),),
        tool_calls=(ToolCall(id=f"toolu_{i:04d}", name=f"tool_{i % tools}",
                             arguments=json.dumps({"query": f"item {i}"})),),
        output_tokens=60) for i in range(steps - 1)]
    replies.append(AnthropicReply(text="All items checked.", output_tokens=40))
    return replies


async def session(steps: int, prompt_cache: str, directory: Path) -> ScriptedAnthropicServer:
    known = known_model(MODEL)
    tools = [make_tool(i) for i in range(8)]
    server = ScriptedAnthropicServer(script(steps, len(tools)), min_cache_tokens=1024).start()
    store = SQLiteCheckpointStore(directory / f"{prompt_cache}.db")
    try:
        model = AnthropicChatModel(MODEL.partition(":")[2], base_url=server.base_url,
                                   api_key="sk-ant-bench", known=known,
                                   prompt_cache=prompt_cache)
        agent = Agent(model=model, tools=tools, system_prompt=prose(0, 96_000))
        result = await Runner(store).run_react(agent, "Check every item, one tool call each.")
        if not result.success:
            raise SystemExit(f"the {prompt_cache} session failed: {result.error}")
        server.assert_done()
    finally:
        server.close()
        await store.close()
    return server


def priced(server: ScriptedAnthropicServer) -> float:
    known = known_model(MODEL)
    assert known is not None
    total = 0.0
    for u in server.usages:
        read, written = u["cache_read_input_tokens"], u["cache_creation_input_tokens"]
        total += cost(known, input_tokens=u["input_tokens"] + read + written,
                      output_tokens=u["output_tokens"], cached_tokens=read,
                      cache_write_tokens=written)
    return total


def shared(before: bytes, after: bytes) -> int:
    n = min(len(before), len(after))
    at = next((i for i in range(n) if before[i] != after[i]), n)
    return at


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        cached = asyncio.run(session(args.steps, "5m", Path(directory)))
        plain = asyncio.run(session(args.steps, "off", Path(directory)))
    first = cached.usages[0]
    prefix = first["input_tokens"] + first["cache_read_input_tokens"] + \
        first["cache_creation_input_tokens"]
    cached_cost, plain_cost = priced(cached), priced(plain)
    ratio = cached_cost / plain_cost
    bodies = cached.bodies
    shares = [shared(a, b) / len(b) for a, b in itertools.pairwise(bodies)]
    unmarked = [MARK.sub(b"", b) for b in bodies]
    content = [shared(a[:-2], b) / (len(a) - 2) for a, b in itertools.pairwise(unmarked)]
    reads = sum(u["cache_read_input_tokens"] for u in cached.usages)
    writes = sum(u["cache_creation_input_tokens"] for u in cached.usages)
    uncached_in = sum(u["input_tokens"] for u in cached.usages)
    last = cached.usages[-1]
    final = last["input_tokens"] + last["cache_read_input_tokens"] + \
        last["cache_creation_input_tokens"]
    print(f"{args.steps} requests; first prompt {prefix:,} tokens, last {final:,}; "
          f"bodies {len(bodies[0]):,} to {len(bodies[-1]):,} bytes")
    print(f"cached:   ${cached_cost:.4f}  (read {reads:,}, written {writes:,}, "
          f"uncached {uncached_in:,} input tokens)")
    print(f"uncached: ${plain_cost:.4f}  ({sum(u['input_tokens'] for u in plain.usages):,} "
          "input tokens)")
    print(f"byte share with the previous request: min {min(shares):.4%}, median "
          f"{statistics.median(shares):.4%}, mean {statistics.fmean(shares):.4%}")
    print(f"previous request (cache marks left out) that is a prefix of the next: min "
          f"{min(content):.2%}")
    goals = [
        (ratio <= COST_RATIO, f"cached cost <= {COST_RATIO}x uncached: {ratio:.3f}"),
        (min(shares) >= SHARE,
         f"every request's bytes >= {SHARE:.0%} identical to the previous one's prefix: "
         f"min {min(shares):.4%}"),
    ]
    for passed, text in goals:
        print(f"{'PASS' if passed else 'FAIL'}  {text}")
    return 0 if all(passed for passed, _ in goals) else 1


if __name__ == "__main__":
    sys.exit(main())
