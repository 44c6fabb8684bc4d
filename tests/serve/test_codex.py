"""Codex CLI end to end: the real ``codex exec`` (tests/clients) against a real
``nonoka serve`` whose upstream is the strict scripted Responses endpoint (it refuses
encrypted reasoning that comes back dropped or altered, as OpenAI does).

Codex sends ``store: false`` and its whole history every turn, never
``previous_response_id``: nonoka must place every request of one Codex thread on one
session line (by Codex's session id and the history), keep the whole exchange there,
and answer Codex's remote compaction with exactly one ``compaction`` item."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from nonoka.serve.compaction import PROMPT as COMPACT_PROMPT
from nonoka.serve.compaction import SUMMARY_PREFIX, read_compaction
from nonoka.state.messages import ToolCall
from nonoka.testing.server import ReasoningItem, ResponsesReply, ScriptedResponsesServer
from tests.pg import schema_url, temp_schema
from tests.serve.codex_client import Codex, CodexRun, Outside
from tests.serve.harness import Served, served_with
from tests.serve.test_keys import make_key

MODEL = "openai-responses:scripted-model"


class Script:
    """The upstream's answers in order; each is a function of the request it answers,
    so a step can check what nonoka sent before answering."""

    def __init__(self) -> None:
        self.steps: list[Any] = []
        self.seen: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Any:
        self.seen.append(body)
        if not self.steps:
            raise AssertionError(f"the model was called more often than scripted: {body}")
        step = self.steps.pop(0)
        return step(body) if callable(step) else step


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def upstream(script: Script) -> Iterator[ScriptedResponsesServer]:
    with ScriptedResponsesServer(script, strict=["openai_reasoning"]) as running:
        yield running
    assert not running.failures, running.failures


@pytest.fixture
def served(project: Path, upstream: ScriptedResponsesServer,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    env = {"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": "sk-up",
           "NONOKA_DATABASE_URL": ""}
    with served_with(project, MODEL, env, monkeypatch) as running:
        yield running


def exported(project: Path) -> list[dict[str, Any]]:
    """Every session as ``nonoka sessions export --all`` gives it: its index row, its
    entries and its timeline, read back from the JSONL a person would get."""
    done = subprocess.run([sys.executable, "-m", "nonoka", "sessions", "export", "--all",
                           "--dir", str(project)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    sessions: list[dict[str, Any]] = []
    for line in done.stdout.splitlines():
        record = json.loads(line)
        if record.get("type") == "session":
            sessions.append({"id": record["session_id"], "index": record["index"],
                             "lineage": record["lineage"], "entries": [], "events": []})
        elif record.get("type") == "entry":
            sessions[-1]["entries"].append(json.loads(record["entry"]))
        elif record.get("type") == "event":
            sessions[-1]["events"].append((record["kind"], json.loads(record["data"])))
    return sessions


def tree(project: Path) -> list[str]:
    """The rows ``nonoka sessions list --tree`` prints (lines and their branches)."""
    done = subprocess.run([sys.executable, "-m", "nonoka", "sessions", "list", "--tree",
                           "--dir", str(project)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NONOKA_DATABASE_URL": ""})
    assert done.returncode == 0, done.stderr
    return [row for row in done.stdout.splitlines() if row.strip()]


def thread_of(run: CodexRun) -> str:
    """The session id Codex printed (its thread, which it sends as ``session-id``)."""
    found = re.search(r"session id: ([0-9a-f-]{36})", run.stdout + run.stderr)
    assert found, run.stderr
    return found.group(1)


def exec_call(call_id: str, command: str) -> ToolCall:
    return ToolCall(id=call_id, name="exec_command", arguments=json.dumps({"cmd": command}))


def outputs(body: dict[str, Any]) -> dict[str, str]:
    """The function call outputs nonoka sent the model, by call id."""
    return {item["call_id"]: str(item.get("output")) for item in body["input"]
            if item.get("type") == "function_call_output"}


def said(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The conversation after its leading system entries: role, and the text or the
    call ids (a tool entry: the call it answers)."""
    out = []
    for entry in entries:
        meta = entry.get("metadata") or {}
        if entry["role"] == "system":
            continue
        if entry["role"] == "tool":
            out.append(("tool", meta["tool_call_id"]))
        elif meta.get("tool_calls"):
            out.append(("calls", ",".join(c["id"] for c in meta["tool_calls"])))
        else:
            out.append((entry["role"], entry["content"]))
    return out


PATCH = """apply_patch <<'EOF'
*** Begin Patch
*** Update File: fruit.txt
@@
-papaya
+mango
*** End Patch
EOF"""
"""A patch as Codex's model writes one: Codex applies it itself."""


def test_a_codex_tool_loop_is_one_session_line(tmp_path: Path, project: Path,
                                               served: Served, script: Script,
                                               upstream: ScriptedResponsesServer,
                                               outside: Outside) -> None:
    script.steps += [
        ResponsesReply(output=[ReasoningItem(summary=("Write the file first.",)),
                               exec_call("call_write", "printf 'papaya\\n' > fruit.txt")]),
        ResponsesReply(output=[ReasoningItem(), exec_call("call_patch", PATCH)]),
        ResponsesReply(output=[ReasoningItem(), exec_call("call_read", "cat fruit.txt")]),
        ResponsesReply(output=["The file says mango."]),
    ]
    codex = Codex(tmp_path / "codex-home", tmp_path / "workspace", served.url, outside)
    run = codex.exec("Write papaya into fruit.txt, patch it to mango, read it back.")
    assert run.returncode == 0, run.stderr
    assert (codex.workspace / "fruit.txt").read_text() == "mango\n"
    assert "The file says mango." in run.stdout
    # what reached the model: each step's tool output, Codex's own, and the model's
    # encrypted reasoning sent back unaltered (the strict endpoint refuses anything else)
    _, second, third, fourth = upstream.requests
    assert upstream.rejections == []
    assert "call_write" in outputs(second)
    assert "Updated the following files" in outputs(third)["call_patch"]
    assert "mango" in outputs(fourth)["call_read"]
    assert [i["type"] for i in fourth["input"] if i.get("type") == "reasoning"] == \
        ["reasoning"] * 3
    # one session line holds the whole loop, named by Codex's thread
    [line] = exported(project)
    assert line["index"]["metadata"]["host_session_id"] == f"codex:{thread_of(run)}"
    assert line["lineage"] is None  # not a branch of anything
    assert said(line["entries"])[1:] == [
        ("user", "Write papaya into fruit.txt, patch it to mango, read it back."),
        ("calls", "call_write"), ("tool", "call_write"),
        ("calls", "call_patch"), ("tool", "call_patch"),
        ("calls", "call_read"), ("tool", "call_read"),
        ("assistant", "The file says mango.")]
    # store: false: the exchange is kept, its responses are not found by id
    made = [data["id"] for kind, data in line["events"]
            if kind == "response" and "id" in data]
    assert len(made) == 4
    for response_id in made:
        status, _, _ = served.request("GET", f"/v1/responses/{response_id}")
        assert status == 404


def texts(body: dict[str, Any]) -> list[str]:
    """The user messages' texts of a request nonoka sent the model."""
    return [part.get("text", "") for item in body["input"]
            if item.get("type") == "message" and item.get("role") == "user"
            for part in (item["content"] if isinstance(item["content"], list)
                         else [{"text": item["content"]}])]


def test_codex_compacts_through_nonoka_and_the_history_stays(
        tmp_path: Path, project: Path, served: Served, script: Script,
        upstream: ScriptedResponsesServer, outside: Outside) -> None:
    def summarise(body: dict[str, Any]) -> ResponsesReply:
        assert texts(body)[-1] == COMPACT_PROMPT  # nonoka's compaction, the whole loop
        assert "one" in outputs(body)["call_one"]
        return ResponsesReply(output=["SUMMARY: echo one printed one."])

    def after(body: dict[str, Any]) -> ResponsesReply:
        assert SUMMARY_PREFIX + "SUMMARY: echo one printed one." in texts(body)
        assert not outputs(body)  # the summary stands for the loop
        return ResponsesReply(output=["Done after compaction."])

    script.steps += [
        # the usage Codex reads crosses model_auto_compact_token_limit: it compacts
        ResponsesReply(output=[exec_call("call_one", "echo one")], input_tokens=5000),
        summarise, after, ResponsesReply(output=["Still papaya-free."])]
    codex = Codex(tmp_path / "codex-home", tmp_path / "workspace", served.url, outside,
                  compact_at=1000)
    run = codex.exec("Run echo one.")
    assert run.returncode == 0, run.stderr
    assert "Done after compaction." in run.stdout
    thread = thread_of(run)
    again = codex.exec("Anything else?", resume=thread)
    assert again.returncode == 0, again.stderr
    assert "Still papaya-free." in again.stdout
    assert upstream.rejections == [] and not script.steps
    # exactly one compaction item came back, nonoka's, and Codex kept it
    [compacted] = [r["payload"] for r in codex.rollout() if r["type"] == "compacted"]
    [item] = [i for i in compacted["replacement_history"] if i.get("type") == "compaction"]
    assert read_compaction(item) is not None
    # nonoka keeps everything: the thread is one line, edited in place where Codex put
    # the summary, and the compaction a session of its own (as Claude Code's) holding
    # the whole loop the summary stands for
    sessions = exported(project)
    [line] = [s for s in sessions if s["index"]["metadata"]["purpose"] == "chat"]
    [compaction] = [s for s in sessions if s["index"]["metadata"]["purpose"] == "compaction"]
    assert len(sessions) == 2 and line["lineage"] is None and compaction["lineage"] is None
    assert line["index"]["metadata"]["host_session_id"] == f"codex:{thread}"
    assert compaction["index"]["metadata"]["compaction_of"] == line["id"]
    assert said(compaction["entries"])[1:] == [
        ("user", "Run echo one."), ("calls", "call_one"), ("tool", "call_one"),
        ("user", COMPACT_PROMPT), ("assistant", "SUMMARY: echo one printed one.")]
    assert said(line["entries"])[1:] == [
        ("user", "Run echo one."),
        ("user", SUMMARY_PREFIX + "SUMMARY: echo one printed one."),
        ("assistant", "Done after compaction."),
        ("user", "Anything else?"), ("assistant", "Still papaya-free.")]
    assert [data["reason"] for kind, data in line["events"] if kind == "history_edited"] \
        == ["history_compacted"]
    assert len(tree(project)) == 1


# -- Codex's requests, sent as Codex sends them ----------------------------------------------


def codex_body(history: list[dict[str, Any]], thread: str | None = None,
               store: bool = False) -> dict[str, Any]:
    """A request the way Codex makes one: the whole history, ``store: false``, the
    reasoning's encrypted content asked for, its thread as the cache key and in
    ``client_metadata``."""
    body: dict[str, Any] = {"model": "nonoka", "input": history, "store": store,
                            "stream": True, "include": ["reasoning.encrypted_content"],
                            "tools": [EXEC_TOOL], "tool_choice": "auto",
                            "parallel_tool_calls": True, "reasoning": {"summary": "auto"}}
    if thread is not None:
        body["prompt_cache_key"] = thread
        body["client_metadata"] = {"session_id": thread, "thread_id": thread}
    return body


EXEC_TOOL = {"type": "function", "name": "exec_command", "description": "Runs a command.",
             "strict": False, "parameters": {"type": "object", "properties": {
                 "cmd": {"type": "string"}}, "required": ["cmd"]}}


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]}


def answered(served: Served, body: dict[str, Any],
             headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The response a streamed request ended with."""
    events = served.events(body, headers)
    assert events[-1]["type"] == "response.completed", events[-1]
    response: dict[str, Any] = events[-1]["response"]
    return response


def test_one_thread_one_line_two_threads_two(project: Path, served: Served,
                                             script: Script) -> None:
    script.steps += ["Hello from one.", "Again, one.", "Hello from two."]
    history = [{"type": "message", "role": "developer",
                "content": [{"type": "input_text", "text": "Be brief."}]}, user("Hi.")]
    first = answered(served, codex_body(history, "thread-one"), {"session-id": "thread-one"})
    # the next turn names its thread in client_metadata only: the same line
    following = [*history, *first["output"], user("Again?")]
    answered(served, codex_body(following, "thread-one"))
    # the same words under another thread are a conversation of their own
    answered(served, codex_body(history, "thread-two"), {"session-id": "thread-two"})
    lines = {line["index"]["metadata"]["host_session_id"]: said(line["entries"])
             for line in exported(project)}
    assert lines == {
        "codex:thread-one": [("user", "Hi."), ("assistant", "Hello from one."),
                             ("user", "Again?"), ("assistant", "Again, one.")],
        "codex:thread-two": [("user", "Hi."), ("assistant", "Hello from two.")]}


def test_a_rewound_history_branches_the_line(project: Path, served: Served,
                                             script: Script) -> None:
    script.steps += ["Papaya.", "Mango.", "Kiwi."]
    history = [user("A fruit?")]
    first = answered(served, codex_body(history, "t"))
    second = answered(served, codex_body([*history, *first["output"], user("Another?")], "t"))
    assert second["output"][-1]["content"][0]["text"] == "Mango."
    # the user goes back before "Another?" and asks something else
    answered(served, codex_body([*history, *first["output"], user("A green one?")], "t"))
    by_parent = {line["lineage"]["forked_from"] if line["lineage"] else None: line
                 for line in exported(project)}
    root, branch = by_parent[None], by_parent[next(k for k in by_parent if k)]
    assert branch["lineage"]["forked_from"] == root["id"]
    assert said(root["entries"]) == [("user", "A fruit?"), ("assistant", "Papaya."),
                                     ("user", "Another?"), ("assistant", "Mango.")]
    assert said(branch["entries"]) == [("user", "A fruit?"), ("assistant", "Papaya."),
                                       ("user", "A green one?"), ("assistant", "Kiwi.")]


def test_a_stored_whole_history_is_found_by_id(served: Served, script: Script) -> None:
    script.steps += ["Stored."]
    made = answered(served, codex_body([user("Keep this.")], "kept", store=True))
    status, _, raw = served.request("GET", f"/v1/responses/{made['id']}")
    assert status == 200 and json.loads(raw)["output"] == made["output"]


def test_encrypted_reasoning_comes_back_where_no_line_holds_it(
        tmp_path: Path, served: Served, script: Script,
        upstream: ScriptedResponsesServer, monkeypatch: pytest.MonkeyPatch) -> None:
    script.steps += [
        ResponsesReply(output=[ReasoningItem(summary=("List it.",)),
                               exec_call("call_ls", "ls")]),
        ResponsesReply(output=[ReasoningItem(), "Nothing there."])]
    history = [user("What is here?")]
    first = answered(served, codex_body(history, "moved"))
    reasoning = [i for i in first["output"] if i["type"] == "reasoning"]
    assert [i["encrypted_content"][:20] for i in reasoning] == ["nonoka.reasoning.v1."]
    # the client goes on against another server (its own database): no line holds
    # the loop, yet the model gets its encrypted reasoning back, from the client
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = Served(elsewhere, MODEL)
    try:
        then = [*history, *first["output"],
                {"type": "function_call_output", "call_id": "call_ls", "output": ""}]
        events = other.events(codex_body(then, "moved"))
    finally:
        other.stop()
    assert events[-1]["type"] == "response.completed", events[-1]
    assert upstream.rejections == []
    sent_back = [i for i in upstream.requests[-1]["input"] if i.get("type") == "reasoning"]
    assert len(sent_back) == 1 and sent_back[0]["encrypted_content"]


def test_a_history_sent_again_gets_its_stored_answer(project: Path, served: Served,
                                                     script: Script) -> None:
    script.steps += [ResponsesReply(output=["One.", exec_call("call_1", "true")])]
    body = codex_body([user("Hi.")], "again")
    first = answered(served, body)
    # the client lost the stream and sends the same history: the model is not asked
    # twice, the answer is the stored one, streamed whole
    events = served.events(body)
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"] == first["output"]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == first["output"]
    [line] = exported(project)
    assert said(line["entries"]) == [("user", "Hi."), ("calls", "call_1")]


def test_one_thread_id_under_two_owners_is_two_lines(project: Path, script: Script,
                                                     upstream: ScriptedResponsesServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": "sk-up",
                        "NONOKA_DATABASE_URL": ""}.items():
        monkeypatch.setenv(name, value)
    alice, bob = make_key(project, "alice"), make_key(project, "bob")
    script.steps += ["For Alice.", "For Bob.", "Alice again."]
    keyed = Served(project, MODEL, keys=True)
    try:
        history = [user("Hi.")]
        mine = answered(keyed, codex_body(history, "shared"),
                        {"Authorization": f"Bearer {alice}", "session-id": "shared"})
        answered(keyed, codex_body(history, "shared"),
                 {"Authorization": f"Bearer {bob}", "session-id": "shared"})
        answered(keyed, codex_body([*history, *mine["output"], user("More?")], "shared"),
                 {"Authorization": f"Bearer {alice}", "session-id": "shared"})
    finally:
        keyed.stop()
    lines = sorted(said(line["entries"]) for line in exported(project))
    assert lines == [
        [("user", "Hi."), ("assistant", "For Alice."), ("user", "More?"),
         ("assistant", "Alice again.")],
        [("user", "Hi."), ("assistant", "For Bob.")]]


def test_new_instructions_keep_the_line(project: Path, served: Served,
                                        script: Script) -> None:
    def developer(text: str) -> dict[str, Any]:
        return {"type": "message", "role": "developer",
                "content": [{"type": "input_text", "text": text}]}

    script.steps += ["First.", "Second."]
    first = answered(served, codex_body([developer("Be brief."), user("One?")], "i",
                                        store=True))
    # the client's instructions changed (Codex's do as its settings change): the line
    # goes on, the model is sent the new ones, and the answer is found where it is
    second = answered(served, codex_body([developer("Be very brief."), developer("Today."),
                                          user("One?"), *first["output"], user("Two?")],
                                         "i", store=True))
    status, _, raw = served.request("GET", f"/v1/responses/{second['id']}")
    assert status == 200 and json.loads(raw)["output"] == second["output"]
    [line] = exported(project)
    assert [e["content"] for e in line["entries"]] == [
        "Be very brief.", "Today.", "One?", "First.", "Two?", "Second."]


def test_one_thread_one_line_on_postgres(project: Path, script: Script,
                                         upstream: ScriptedResponsesServer,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    script.steps += ["One.", "Two."]
    with temp_schema() as schema:
        url = schema_url(schema)
        for name, value in {"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": "sk-up",
                            "NONOKA_DATABASE_URL": url}.items():
            monkeypatch.setenv(name, value)
        pg = Served(project, MODEL, database_url=url)
        try:
            first = answered(pg, codex_body([user("Hi.")], "pg"), {"session-id": "pg"})
            answered(pg, codex_body([user("Hi."), *first["output"], user("And?")], "pg"),
                     {"session-id": "pg"})
        finally:
            pg.stop()
        [line] = exported(project)
    assert line["index"]["metadata"]["host_session_id"] == "codex:pg"
    assert said(line["entries"]) == [("user", "Hi."), ("assistant", "One."),
                                     ("user", "And?"), ("assistant", "Two.")]


# -- a compacted thread, as Codex sends it, through openai-python ------------------------


def developer(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "developer",
            "content": [{"type": "input_text", "text": text}]}


def codex_client(served: Served, thread: str, key: str = "unused") -> OpenAI:
    """openai-python as Codex's requests look: its thread in the ``session-id`` header."""
    return served.client(key, {"session-id": thread})


def codex_turn(client: OpenAI, thread: str, history: list[Any]) -> Any:
    """A Codex request: the whole history, ``store: false``, the thread named again in
    ``client_metadata`` and as the cache key."""
    return client.responses.create(
        model="nonoka", input=history, store=False, include=["reasoning.encrypted_content"],
        prompt_cache_key=thread, tools=[EXEC_TOOL],  # type: ignore[list-item]
        extra_body={"client_metadata": {"session_id": thread}})


def items(response: Any) -> list[dict[str, Any]]:
    return [item.to_dict() for item in response.output]


def by_purpose(project: Path) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for session in exported(project):
        found.setdefault(session["index"]["metadata"]["purpose"], []).append(session)
    return found


SUMMARY = "SUMMARY: ls listed nothing."


def compacted_thread(served: Served, script: Script, thread: str = "compacted",
                     key: str = "unused") -> tuple[OpenAI, list[Any], dict[str, Any]]:
    """A thread that ran a tool, then was compacted (``/v1/responses/compact``): its
    client, the history Codex keeps (its messages, then the compaction item), the item."""
    script.steps += [
        ResponsesReply(output=[ReasoningItem(summary=("List it.",)),
                               exec_call("call_ls", "ls")]),
        ResponsesReply(output=[SUMMARY])]
    client = codex_client(served, thread, key)
    history = [developer("Be brief."), user("What is here?")]
    first = codex_turn(client, thread, history)
    looped: Any = [*history, *items(first),
              {"type": "function_call_output", "call_id": "call_ls", "output": ""}]
    [item] = items(client.responses.compact(model="nonoka", input=looped))
    return client, [*history, item], item


def test_a_compacted_thread_goes_on_in_its_line(project: Path, served: Served,
                                                script: Script,
                                                upstream: ScriptedResponsesServer) -> None:
    client, kept, _ = compacted_thread(served, script)
    script.steps += [ResponsesReply(output=["Nothing was there."]),
                     ResponsesReply(output=["Still nothing."])]
    after = codex_turn(client, "compacted", [*kept, user("So?")])
    assert after.output_text == "Nothing was there."
    # the model is sent the summary in place of the conversation, then what follows
    assert texts(upstream.requests[-1]) == ["What is here?", SUMMARY_PREFIX + SUMMARY, "So?"]
    assert not outputs(upstream.requests[-1])
    last = codex_turn(client, "compacted",
                      [*kept, user("So?"), *items(after), user("And now?")])
    assert last.output_text == "Still nothing."
    assert upstream.rejections == []
    found = by_purpose(project)
    [line], [compaction] = found["chat"], found["compaction"]
    assert line["lineage"] is None and line["index"]["metadata"]["host_session_id"] == \
        "codex:compacted"
    # the line edited in place where Codex put the summary, then going on
    assert said(line["entries"]) == [
        ("user", "What is here?"), ("user", SUMMARY_PREFIX + SUMMARY), ("user", "So?"),
        ("assistant", "Nothing was there."), ("user", "And now?"),
        ("assistant", "Still nothing.")]
    assert [data["reason"] for kind, data in line["events"] if kind == "history_edited"] \
        == ["history_compacted"]
    assert [data["session_id"] for kind, data in line["events"] if kind == "compaction"] \
        == [compaction["id"]]
    # the whole earlier conversation: the compaction's own session, named by the line
    assert compaction["index"]["metadata"]["compaction_of"] == line["id"]
    assert said(compaction["entries"]) == [
        ("user", "What is here?"), ("calls", "call_ls"), ("tool", "call_ls"),
        ("user", COMPACT_PROMPT), ("assistant", SUMMARY)]
    assert len(tree(project)) == 1


def test_a_compaction_retried_after_a_restart_is_stored_once(
        project: Path, served: Served, script: Script,
        upstream: ScriptedResponsesServer) -> None:
    """openai-python (or Codex) sends a compaction again after losing its answer, to a
    server restarted meanwhile: the retry gets the compaction already stored, from the
    compaction's own session, and the model is not asked again."""
    script.steps += [ResponsesReply(output=[exec_call("call_ls", "ls")]),
                     ResponsesReply(output=[SUMMARY]),
                     ResponsesReply(output=["A second summary."])]
    client = codex_client(served, "retried")
    history = [developer("Be brief."), user("What is here?")]
    looped: Any = [*history, *items(codex_turn(client, "retried", history)),
                   {"type": "function_call_output", "call_id": "call_ls", "output": ""}]
    first = client.responses.compact(model="nonoka", input=looped)
    served.stop()
    again = Served(project, MODEL)
    try:
        retried = codex_client(again, "retried").responses.compact(
            model="nonoka", input=looped, extra_headers={"x-stainless-retry-count": "1"})
    finally:
        again.stop()
    assert retried.id == first.id and items(retried) == items(first)
    assert len(upstream.requests) == 2  # the turn and one summary
    assert len(by_purpose(project)["compaction"]) == 1


def test_a_compaction_item_pulls_no_other_line(project: Path, script: Script,
                                               upstream: ScriptedResponsesServer,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The item names its line only for that line's own client: another thread of the
    same owner, or another owner's client under the same thread name, sending it gets
    a line of its own; the compacted line is left as it was."""
    for name, value in {"OPENAI_BASE_URL": upstream.base_url, "OPENAI_API_KEY": "sk-up",
                        "NONOKA_DATABASE_URL": ""}.items():
        monkeypatch.setenv(name, value)
    alice, bob = make_key(project, "alice"), make_key(project, "bob")
    keyed = Served(project, MODEL, keys=True)
    try:
        _, kept, _ = compacted_thread(keyed, script, "shared", alice)
        script.steps += ["Other thread.", "Bob's."]
        answer = [{"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": "Earlier."}]}]
        for thread, key in (("other", alice), ("shared", bob)):
            codex_turn(codex_client(keyed, thread, key), thread,
                       [*kept, *answer, user("Go on?")])
    finally:
        keyed.stop()
    found = by_purpose(project)
    [compaction] = found["compaction"]
    lines = {said(s["entries"])[-1][1]: s for s in found["chat"]}
    assert sorted(lines) == ["Bob's.", "Other thread.", "call_ls"]
    compacted = lines["call_ls"]  # the compacted line, as it was
    assert compaction["index"]["metadata"]["compaction_of"] == compacted["id"]
    assert said(compacted["entries"]) == [("user", "What is here?"), ("calls", "call_ls")]
    went_on = [("user", "What is here?"), ("user", SUMMARY_PREFIX + SUMMARY),
               ("assistant", "Earlier."), ("user", "Go on?")]
    # alice's other thread: a branch where its history parts from the line it shares
    # its first message with (as for any two threads), not that line taken over
    other = lines["Other thread."]
    assert other["lineage"]["forked_from"] == compacted["id"]
    assert other["lineage"]["fork_point"] == 2  # the system entry, "What is here?"
    assert said(other["entries"]) == [*went_on, ("assistant", "Other thread.")]
    assert said(lines["Bob's."]["entries"]) == [*went_on, ("assistant", "Bob's.")]
    assert lines["Bob's."]["lineage"] is None
    for session in found["chat"]:
        assert not [kind for kind, _ in session["events"] if kind == "history_edited"]
