"""Every credential shape is masked on every surface that shows a stored conversation.

One project holds a session per shape of ``tests/support/credentials.py``, made by real
``nonoka run`` turns (the turn code in-process, a scripted model, real SQLite): the
credential is in the first message, in a tool call's arguments, in the tool's result and
in the answer. Each surface is then read as people read it: ``sessions list``, ``show``,
``search`` (plain and ``--json``), the Markdown export, and the ``nonoka ui`` session page
over HTTP from a real server process. The JSONL export is the lossless backup and keeps
the stored text; that is checked too, so the choice cannot change by accident.
"""

from __future__ import annotations

import asyncio
import html
import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from nonoka.cli.commands import cli
from nonoka.cli.run_cmd import run_turn
from nonoka.redact import MASK
from nonoka.testing import ScriptedModel, call, text
from tests.support.credentials import CREDENTIALS, Credential, sample
from tests.ui.harness import UiServer

IDS = [c.id for c in CREDENTIALS]


@dataclass
class Shelf:
    """The project and the session that holds each credential, by kind."""

    path: Path
    sessions: dict[str, str]


@pytest.fixture(scope="module")
def shelf(tmp_path_factory: pytest.TempPathFactory) -> Shelf:
    path = tmp_path_factory.mktemp("credentials") / "project"
    path.mkdir()
    sessions: dict[str, str] = {}
    with pytest.MonkeyPatch.context() as env:
        env.delenv("NONOKA_DATABASE_URL", raising=False)
        for credential in CREDENTIALS:
            model = ScriptedModel([call("search_text", {"text": credential.text}),
                                   text(f"Noted: {credential.text} stays here.")])
            outcome = asyncio.run(run_turn(path, f"keep this safe: {credential.text}", model))
            sessions[credential.kind] = outcome.session_id
    return Shelf(path, sessions)


def nonoka(shelf: Shelf, *args: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``nonoka ARGS`` in the project (click's runner, output piped); what it printed."""
    monkeypatch.chdir(shelf.path)
    for name in ("NONOKA_DATABASE_URL", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def absent(credential: Credential, shown: str) -> None:
    assert credential.secret not in shown, (credential.kind, shown)
    assert html.escape(credential.secret) not in shown, (credential.kind, shown)


@pytest.mark.parametrize("credential", CREDENTIALS, ids=IDS)
def test_titles_and_the_listing(shelf: Shelf, credential: Credential,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    listed = nonoka(shelf, "sessions", "list", "-n", "100", "--json", monkeypatch=monkeypatch)
    [row] = [r for r in json.loads(listed) if r["session_id"] == shelf.sessions[credential.kind]]
    assert row["title"].startswith("keep this safe: ")
    absent(credential, row["title"])
    absent(credential, nonoka(shelf, "sessions", "list", "-n", "100", monkeypatch=monkeypatch))


@pytest.mark.parametrize("credential", CREDENTIALS, ids=IDS)
def test_sessions_show(shelf: Shelf, credential: Credential,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    sid = shelf.sessions[credential.kind]
    for args in (("sessions", "show", sid), ("sessions", "show", sid, "--json")):
        shown = nonoka(shelf, *args, monkeypatch=monkeypatch)
        assert "search_text" in shown
        absent(credential, shown)


@pytest.mark.parametrize("credential", CREDENTIALS, ids=IDS)
def test_search_snippets(shelf: Shelf, credential: Credential,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Searching for the credential itself finds the entries that hold it (search reads
    what is stored) and shows none of it."""
    sid = shelf.sessions[credential.kind]
    hits = json.loads(nonoka(shelf, "sessions", "search", "--session", sid, "--json", "--",
                             credential.text, monkeypatch=monkeypatch))
    assert {h["role"] for h in hits} >= {"user", "assistant"}, hits
    for hit in hits:
        absent(credential, hit["snippet"] + hit["title"])
    plain = nonoka(shelf, "sessions", "search", "--session", sid, "--", credential.text,
                   monkeypatch=monkeypatch)
    assert plain.count(sid[:8]) == len(hits)
    absent(credential, plain)


@pytest.mark.parametrize("credential", CREDENTIALS, ids=IDS)
def test_markdown_export(shelf: Shelf, credential: Credential,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    exported = nonoka(shelf, "sessions", "export", shelf.sessions[credential.kind],
                      "--format", "markdown", monkeypatch=monkeypatch)
    assert "## User\n\nkeep this safe: " in exported and MASK in exported
    absent(credential, exported)


def test_the_jsonl_export_is_the_lossless_backup(shelf: Shelf,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    credential = sample("pem private key")
    exported = nonoka(shelf, "sessions", "export", shelf.sessions[credential.kind],
                      monkeypatch=monkeypatch)
    entries = [json.loads(json.loads(line)["entry"]) for line in exported.splitlines()
               if json.loads(line).get("type") == "entry"]
    assert f"keep this safe: {credential.text}" in [e["content"] for e in entries]


@pytest.fixture(scope="module")
def ui(shelf: Shelf) -> Iterator[UiServer]:
    server = UiServer(shelf.path)
    yield server
    server.stop()


def fetch(ui: UiServer, path: str) -> str:
    request = urllib.request.Request(
        ui.base.rstrip("/") + path,
        headers={"Authorization": f"Bearer {ui.token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(answer.read().decode())


@pytest.mark.parametrize("credential", CREDENTIALS, ids=IDS)
def test_the_ui_session_page(shelf: Shelf, ui: UiServer, credential: Credential) -> None:
    sid = shelf.sessions[credential.kind]
    page = fetch(ui, f"/s/{sid}")
    assert "keep this safe: " in page and "search_text" in page
    absent(credential, page)
    more = json.loads(fetch(ui, f"/s/{sid}/entries?after=-1"))["html"]
    assert "keep this safe: " in more
    absent(credential, more)
    absent(credential, fetch(ui, f"/?q={sid[:8]}"))

