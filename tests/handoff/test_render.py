"""The renderers on their own: a stored conversation (texts, images, tool calls and
results with images, reasoning of two providers) as Claude Code's transcript and as a
Codex rollout; and the hand-off's refusals."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nonoka.errors import ConfigurationError
from nonoka.handoff import claude, codex, opencode
from nonoka.handoff.conversation import check_answered
from nonoka.handoff.move import hand_off
from nonoka.runtime.runner import Runner
from nonoka.runtime.session import Session
from nonoka.state.entries import MemoryEntry
from nonoka.state.messages import FilePart, ReasoningPart, TextPart, ToolCall
from nonoka.store.project import open_project_stores
from nonoka.store.records import SessionRecord

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAACAAFUok9dAAAAAElFTkSuQmCC"
NOW = datetime(2026, 12, 6, 10, 30, 5, 123000, tzinfo=UTC)
CALL = ToolCall(id="call_shot_1", name="screenshot", arguments='{"region": "top"}')


def conversation() -> list[MemoryEntry]:
    return [
        MemoryEntry.make("system", "You are OpenCode."),
        MemoryEntry.make("user", "Look at this and the page.", parts=[
            TextPart(text="Look at this and the page.").model_dump(exclude_none=True),
            FilePart(media_type="image/png", data=PNG).model_dump(exclude_none=True)]),
        MemoryEntry.assistant("I will take a screenshot.", [CALL], reasoning=[
            ReasoningPart(text="Signed thought.",
                          provider_metadata={"anthropic": {"signature": "sig-1"}}),
            ReasoningPart(text="Another vendor's thought.")]),
        MemoryEntry.tool_result(CALL, "the top of the page", is_error=True, parts=[
            TextPart(text="the top of the page"), FilePart(media_type="image/png", data=PNG)]),
        MemoryEntry.assistant("The page shows a header.", reasoning=[
            ReasoningPart(text="summary", provider_metadata={"openai_responses": {
                "type": "reasoning", "id": "rs_1", "summary": [],
                "encrypted_content": "sealed"}})]),
    ]


def test_claude_code_gets_the_messages_api_conversation() -> None:
    sent = claude.messages(conversation())
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant"]
    assert sent[0]["content"] == [
        {"type": "text", "text": "Look at this and the page."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PNG}}]
    # Anthropic's signed thinking goes back; another vendor's reasoning cannot
    assert sent[1]["content"] == [
        {"type": "thinking", "thinking": "Signed thought.", "signature": "sig-1"},
        {"type": "text", "text": "I will take a screenshot."},
        {"type": "tool_use", "id": "call_shot_1", "name": "screenshot",
         "input": {"region": "top"}}]
    assert sent[2]["content"] == [{
        "type": "tool_result", "tool_use_id": "call_shot_1", "is_error": True,
        "content": [{"type": "text", "text": "the top of the page"},
                    {"type": "image", "source": {"type": "base64",
                                                 "media_type": "image/png", "data": PNG}}]}]
    assert sent[3]["content"] == [{"type": "text", "text": "The page shows a header."}]


def test_claude_code_transcript_is_one_chain(tmp_path: Path) -> None:
    records = claude.transcript(conversation(), "sess-1", Path("/work/my app"), NOW,
                                "anthropic:claude-opus-5-5")
    assert [r["type"] for r in records] == ["user", "assistant", "user", "assistant"]
    assert records[0]["parentUuid"] is None
    assert [r["parentUuid"] for r in records[1:]] == [r["uuid"] for r in records[:-1]]
    assert {r["sessionId"] for r in records} == {"sess-1"}
    assert {r["cwd"] for r in records} == {"/work/my app"}
    assert records[0]["timestamp"] == "2026-12-06T10:30:05.123Z"
    assert records[1]["message"]["role"] == "assistant"
    assert records[1]["message"]["stop_reason"] == "tool_use"
    assert records[3]["message"]["stop_reason"] == "end_turn"
    path = claude.write(records, tmp_path / ".claude", Path("/work/my app"), "sess-1")
    assert path == tmp_path / ".claude" / "projects" / "-work-my-app" / "sess-1.jsonl"
    assert [json.loads(line) for line in path.read_text().splitlines()] == records
    with pytest.raises(FileExistsError):  # never over another session's transcript
        claude.write(records, tmp_path / ".claude", Path("/work/my app"), "sess-1")


def test_codex_gets_the_responses_api_items() -> None:
    items = codex.items(conversation())
    assert [i["type"] for i in items] == ["message", "message", "function_call",
                                          "function_call_output", "reasoning", "message"]
    assert items[0] == {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Look at this and the page."},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}",
         "detail": "auto"}]}
    assert items[1] == {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "I will take a screenshot."}]}
    assert items[2] == {"type": "function_call", "call_id": "call_shot_1",
                        "name": "screenshot", "arguments": '{"region": "top"}'}
    assert items[3] == {"type": "function_call_output", "call_id": "call_shot_1", "output": [
        {"type": "input_text", "text": "the top of the page"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}",
         "detail": "auto"}]}
    # OpenAI's own reasoning item goes back sealed as it came; Anthropic's cannot
    assert items[4]["encrypted_content"] == "sealed"
    assert "Signed thought." not in json.dumps(items)


def test_codex_rollout(tmp_path: Path) -> None:
    records = codex.rollout(conversation(), "thread-1", Path("/work/app"), NOW)
    assert records[0]["type"] == "session_meta"
    assert records[0]["payload"]["id"] == records[0]["payload"]["session_id"] == "thread-1"
    assert records[0]["payload"]["cwd"] == "/work/app"
    assert [r["type"] for r in records[1:]] == ["response_item"] * 6
    path = codex.write(records, tmp_path, "thread-1", NOW)
    assert path == tmp_path / "sessions" / "2026" / "12" / "06" / \
        "rollout-2026-12-06T10-30-05-thread-1.jsonl"
    assert [json.loads(line) for line in path.read_text().splitlines()] == records


def test_a_point_inside_a_tool_call_is_refused() -> None:
    entries = conversation()
    check_answered(entries[:4], 4)
    with pytest.raises(ConfigurationError, match=r"entry 2 makes a tool call.*--at 2"):
        check_answered(entries[:3], 3)


def stored_session(project: Path) -> str:
    async def go() -> str:
        async with open_project_stores(project) as stores:
            session = Session("11111111-2222-4333-8444-555555555555")
            for entry in conversation():
                session.memory.append(entry)
            await Runner(stores.checkpoints).save_session(session)
            await stores.index.upsert_session(SessionRecord(
                session_id=session.session_id, title="t", created_at=1.0,
                last_active=1.0, metadata={"purpose": "chat", "cwd": str(project)}))
            return session.session_id
    return asyncio.run(go())


def test_hand_off_refuses_what_it_cannot_carry(tmp_path: Path) -> None:
    sid = stored_session(tmp_path)

    async def go(**given: Any) -> Any:
        async with open_project_stores(tmp_path) as stores:
            return await hand_off(stores, given.pop("source", sid), given.pop("to", "codex"),
                                  home=tmp_path / "home", cwd=tmp_path, **given)

    with pytest.raises(ConfigurationError, match="unknown agent 'gemini'"):
        asyncio.run(go(to="gemini"))
    with pytest.raises(ConfigurationError, match="is not stored"):
        asyncio.run(go(source="99999999-2222-4333-8444-555555555555"))
    with pytest.raises(ConfigurationError, match="--at 9: the session has 5 entries"):
        asyncio.run(go(at=9))
    with pytest.raises(ConfigurationError, match="hold no conversation"):
        asyncio.run(go(at=1))
    with pytest.raises(ConfigurationError, match="--at 2"):
        asyncio.run(go(at=3))
    assert not (tmp_path / "home").exists()  # nothing written for a refused hand-off
    made = asyncio.run(go(at=4))
    assert made.carried == 3 and made.command == ["codex", "resume", made.agent_session]


def nonoka(project: Path, *args: str, path: str | None = None
           ) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, **({"PATH": path} if path is not None else {})}
    return subprocess.run([sys.executable, "-m", "nonoka", "sessions", "handoff", *args],
                          cwd=project, capture_output=True, text=True, timeout=120,
                          env=env, check=False)


def test_the_command_says_what_went_wrong_in_one_line(tmp_path: Path) -> None:
    sid = stored_session(tmp_path)
    unknown = nonoka(tmp_path, "abcdef", "--to", "claude")
    assert unknown.returncode != 0 and "no session id starts with 'abcdef'" in unknown.stderr
    inside = nonoka(tmp_path, sid[:8], "--to", "claude", "--at", "3",
                    "--home", str(tmp_path / "h"))
    assert inside.returncode == 2 and "--at 2" in inside.stderr
    assert len(inside.stderr.strip().splitlines()) == 1
    missing = nonoka(tmp_path, sid[:8], "--to", "claude", "--exec", path="/nonexistent")
    assert missing.returncode == 2 and "`claude` is not on PATH" in missing.stderr
    done = nonoka(tmp_path, sid[:8], "--to", "claude", "--home", str(tmp_path / "h"))
    assert done.returncode == 0, done.stderr
    assert "run in" in done.stdout and "claude --resume" in done.stdout


def test_opencode_gets_its_export() -> None:
    data = opencode.export(conversation(), "ses_handed", Path("/work/app"), NOW, "a title")
    assert data["info"]["id"] == "ses_handed" and data["info"]["directory"] == "/work/app"
    messages = data["messages"]
    assert [m["info"]["role"] for m in messages] == ["user", "assistant", "assistant"]
    ids = [m["info"]["id"] for m in messages]
    assert ids == sorted(ids)  # OpenCode orders a session's messages by id
    assert all(m["info"]["parentID"] == ids[0] for m in messages[1:])
    user = [{k: v for k, v in p.items() if k not in ("id", "sessionID", "messageID")}
            for p in messages[0]["parts"]]
    assert user == [{"type": "text", "text": "Look at this and the page."},
                    {"type": "file", "mime": "image/png",
                     "url": f"data:image/png;base64,{PNG}"}]
    step = messages[1]["parts"]
    assert [p["type"] for p in step] == ["reasoning", "reasoning", "text", "tool"]
    tool = step[3]
    assert (tool["tool"], tool["callID"]) == ("screenshot", "call_shot_1")
    # the call's result rides on its tool part; an error stays an error
    assert tool["state"]["input"] == {"region": "top"}
    assert (tool["state"]["status"], tool["state"]["error"]) == ("error", "the top of the page")
    assert messages[1]["info"]["finish"] == "tool-calls"
    assert messages[2]["parts"][-1]["text"] == "The page shows a header."


def test_opencode_tool_images_are_attachments() -> None:
    entries = conversation()
    entries[3] = MemoryEntry.tool_result(CALL, "the top of the page", parts=[
        TextPart(text="the top of the page"), FilePart(media_type="image/png", data=PNG)])
    state = opencode.export(entries, "ses_x", Path("/w"), NOW)["messages"][1]["parts"][3][
        "state"]
    assert state["status"] == "completed" and state["output"] == "the top of the page"
    [attached] = state["attachments"]
    assert attached["id"].startswith("prt_") and attached["sessionID"] == "ses_x"
    assert {k: attached[k] for k in ("type", "mime", "url")} == {
        "type": "file", "mime": "image/png", "url": f"data:image/png;base64,{PNG}"}
