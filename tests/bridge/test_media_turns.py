"""Images through real bridge turns: stored once by digest, sent to the model byte for
byte by the runtime and by the early dispatch alike (``nonoka.store.media``)."""

from __future__ import annotations

import base64
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

from nonoka.store.media import digest_of
from nonoka.store.sqlite.packing import register
from nonoka.testing import text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.conftest import ScriptItem
from tests.support.bridge import Bridge, assistant, chat, one, text_of, user

IMAGE = random.Random(7).randbytes(200_000)
DATA = base64.b64encode(IMAGE).decode()
PARTS = {"version": "1", "required_capabilities": ["parts"]}


def with_image(prompt: str, name: str) -> dict[str, Any]:
    return {"role": "user", "content": prompt, "parts": [
        {"type": "text", "text": prompt},
        {"type": "file", "media_type": "image/png", "data": DATA, "filename": name}]}


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        register(conn)  # ``entry_text``: an entry row's JSON, deflated or not
        rows = conn.execute(sql).fetchall()
    conn.close()
    return rows


def image_urls(request: dict[str, Any]) -> list[str]:
    return [part["image_url"]["url"] for message in request["messages"]
            if isinstance(message["content"], list)
            for part in message["content"] if part["type"] == "image_url"]


def test_an_image_is_stored_once_and_every_request_sends_it_as_sent(
        bridge: Bridge, scripted: list[ScriptItem], server: ScriptedOpenAIServer) -> None:
    # (A new session's first prompt goes in as text: the image comes in the second turn.)
    history = [user("hello")]
    scripted.append(text("hi"))
    events = bridge.run(chat(history, protocol=PARTS))
    sid = one(events, "session_init")["session_id"]
    prompts = [with_image("what is this?", "shot.png"), user("and its colour?"),
               with_image("the same picture again", "again.png")]
    for n, prompt in enumerate(prompts):
        history += [assistant(text_of(events)), prompt]
        scripted.append(text(f"answer {n}"))
        events = bridge.run(chat(history, session_id=sid, protocol=PARTS))
        assert text_of(events) == f"answer {n}", events
    url = f"data:image/png;base64,{DATA}"
    assert [image_urls(r) for r in server.requests] == [[], [url], [url], [url, url]]
    outcomes = [json.loads(r[0])["outcome"] for r in query(
        bridge.db, "SELECT entry_text(data_json) FROM events WHERE kind = 'early_request' "
        "ORDER BY seq")]
    # The text prompt after the image went early (a prompt holding a file does not): its
    # body came from the stored rows, the image put back byte for byte, and the
    # runtime's own body was the same.
    assert outcomes == ["used"]
    assert query(bridge.db, "SELECT digest, size FROM media") == [
        (digest_of(IMAGE), len(IMAGE))]
    rows = query(bridge.db, "SELECT seq, entry_text(entry_json) FROM session_entries "
                 "WHERE media IS NOT NULL ORDER BY seq")
    assert [seq for seq, _ in rows] == [2, 6]
    assert all(DATA[:100] not in row for _, row in rows)
