"""The JSON Schema and the TypeScript types are what the models generate, and the schema
tells the truth about the wire: what the encoders write validates, what the decoders
reject does not.

The first two tests are the drift check CI runs: a model changed without regenerating
fails them, with the command to run in the message.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from nonoka.protocol import generate, models, schema
from nonoka.protocol.frames import ProtocolError
from nonoka.protocol.models import decode_event, decode_request, encode_event, encode_request
from tests.protocol.test_protocol import ALL_EVENTS, full_chat_request
from tests.protocol.wire_schema import ROOT, schema_errors

COMMAND = "python -m nonoka.protocol.generate"


# -- drift -----------------------------------------------------------------------------


def test_the_committed_schema_and_typescript_types_are_generated_from_the_models() -> None:
    changed = generate.stale(generate.outputs())
    assert not changed, generate.stale_message(changed)


def test_the_drift_check_fails_when_a_model_changes_without_regenerating() -> None:
    class Finish(models.Finish):
        """Last event of a request, as a newer bridge might send it."""

        retry_after: float | None = None

    events = [Finish if model is models.Finish else model for model in schema.EVENTS]
    changed = generate.outputs(schema.build(events=events))
    assert "retry_after" in changed[generate.SCHEMA_FILE]
    assert "  retry_after?: number | null;" in changed[generate.TYPESCRIPT_FILE]
    stale = generate.stale(changed)
    assert stale == [generate.SCHEMA_FILE, generate.TYPESCRIPT_FILE]
    assert COMMAND in generate.stale_message(stale)


def checkout_copy(tmp_path: Path) -> Path:
    """The generated files of this checkout, copied where they can be spoiled."""
    for relative in (generate.SCHEMA_FILE, generate.TYPESCRIPT_FILE):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, tmp_path / relative)
    return tmp_path


def run_generate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nonoka.protocol.generate", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_check_command_fails_on_a_stale_schema_and_regenerating_fixes_it(
        tmp_path: Path) -> None:
    root = checkout_copy(tmp_path)
    assert run_generate("--check", "--root", str(root)).returncode == 0
    spoiled = json.loads((root / generate.SCHEMA_FILE).read_text(encoding="utf-8"))
    spoiled["$defs"]["TextDelta"]["properties"]["colour"] = {"type": "string"}
    (root / generate.SCHEMA_FILE).write_text(json.dumps(spoiled), encoding="utf-8")
    (root / generate.TYPESCRIPT_FILE).unlink()

    checked = run_generate("--check", "--root", str(root))
    assert checked.returncode == 1
    assert COMMAND in checked.stderr
    assert str(generate.SCHEMA_FILE) in checked.stderr
    assert str(generate.TYPESCRIPT_FILE) in checked.stderr

    written = run_generate("--root", str(root))
    assert written.returncode == 0, written.stderr
    assert "build.sh" in written.stdout
    for relative in (generate.SCHEMA_FILE, generate.TYPESCRIPT_FILE):
        assert (root / relative).read_bytes() == (ROOT / relative).read_bytes()
    assert run_generate("--check", "--root", str(root)).returncode == 0


def test_the_command_refuses_a_directory_that_is_no_checkout(tmp_path: Path) -> None:
    done = run_generate("--root", str(tmp_path))
    assert done.returncode == 2
    assert "source checkout" in done.stderr
    assert not list(tmp_path.iterdir())


def test_the_schema_ships_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["nonoka"]
    assert any(fnmatch.fnmatch("protocol/schema.json", p) for p in patterns), patterns
    shipped = resources.files("nonoka.protocol").joinpath("schema.json").read_text("utf-8")
    assert json.loads(shipped)["x-protocol-version"] == "1"


# -- the schema and the wire -----------------------------------------------------------


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: e.type)
def test_every_event_the_bridge_encodes_is_valid(event: Any) -> None:
    frame = json.loads(encode_event(event))
    assert schema_errors(frame, "Event") == []
    assert schema_errors(frame, type(event).__name__) == []


def test_every_request_the_provider_encodes_is_valid() -> None:
    for request in (full_chat_request(), models.CancelRequest(),
                    models.ChatRequest(messages=[{"role": "user", "content": "x"}])):
        assert schema_errors(json.loads(encode_request(request)), "Request") == []


def test_every_example_in_the_protocol_doc_agrees_with_the_decoders() -> None:
    doc = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    received = [line[2:] for line in doc.splitlines() if line.startswith("← ")]
    sent = [line[2:] for line in doc.splitlines() if line.startswith("→ ")]
    assert received and sent
    for line in received:
        decode_event(line.encode())
        assert schema_errors(json.loads(line), "Event") == [], line
    accepted = 0
    for line in sent:
        try:
            decode_request(line.encode())
        except ProtocolError:
            assert schema_errors(json.loads(line), "Request"), line
        else:
            accepted += 1
            assert schema_errors(json.loads(line), "Request") == [], line
    assert accepted >= 3


REJECTED_REQUESTS = [
    {"protocol": {"version": "1"}, "messages": [{"role": "user", "content": "hi"}]},
    {"type": "chat", "messages": [{"role": "user", "content": "hi"}]},
    {"type": "chat", "protocol": {}, "messages": [{"role": "user", "content": "hi"}]},
    {"type": "chat", "protocol": {"version": "1"}, "messages": []},
    {"type": "chat", "protocol": {"version": "1"}, "purpose": "summary",
     "messages": [{"role": "user", "content": "hi"}]},
    {"type": "chat", "protocol": {"version": "1"}, "new_session": "true",
     "messages": [{"role": "user", "content": "hi"}]},
    {"type": "chat", "protocol": {"version": "1"}, "messages": [{"role": "robot"}]},
    {"type": "chat", "protocol": {"version": "1"}, "limits": {"max_tool_calls": -1},
     "messages": [{"role": "user", "content": "hi"}]},
]
REJECTED_EVENTS = [
    {"type": "finish", "usage": {"input_tokens": 0, "output_tokens": 0}},
    {"type": "finish", "finish_reason": "done", "usage": {"input_tokens": 0,
                                                          "output_tokens": 0}},
    {"type": "session_init", "session_id": 5, "recovered": False},
    {"type": "session_init", "session_id": "s", "recovered": True, "recovery_reason": "luck"},
    {"type": "tool_call", "tool_call_id": "c", "tool_name": "t", "arguments": "{}",
     "executed_by": "someone"},
    {"type": "usage", "input_tokens": -1, "output_tokens": 0},
    {"type": "text_delta"},
]


@pytest.mark.parametrize("frame", REJECTED_REQUESTS)
def test_a_request_the_bridge_rejects_is_invalid_in_the_schema(frame: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        decode_request(json.dumps(frame).encode())
    assert schema_errors(frame, "Request")


@pytest.mark.parametrize("frame", REJECTED_EVENTS)
def test_an_event_the_provider_rejects_is_invalid_in_the_schema(frame: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        decode_event(json.dumps(frame).encode())
    assert schema_errors(frame, "Event")
