"""One redaction for every stored and printed field, against the shared table of
credential shapes (``tests/support/credentials.py``: fake, assembled from parts at run
time, each with the shape of the real thing)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonoka import redact as redact_module
from nonoka.redact import MASK, is_env_file, mask_env_line, redact, redact_text
from nonoka.testing import text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem
from tests.support.credentials import CREDENTIALS, ORDINARY, Credential, sample


@pytest.mark.parametrize("credential", CREDENTIALS, ids=[c.id for c in CREDENTIALS])
def test_every_credential_shape_is_masked(credential: Credential) -> None:
    masked = redact_text(credential.text)
    assert credential.secret not in masked, (credential.kind, masked)
    assert MASK in masked
    assert redact({"nested": [credential.text]}) == {"nested": [masked]}


@pytest.mark.parametrize("credential", CREDENTIALS, ids=[c.id for c in CREDENTIALS])
def test_a_credential_in_tool_call_arguments_is_masked(credential: Credential) -> None:
    """Arguments are JSON, and a tool call's JSON holds them as a string: the quotes
    around a value are escaped once, or twice."""
    arguments = json.dumps({"text": credential.text})
    for logged in (arguments, json.dumps([{"name": "t", "arguments": arguments}])):
        masked = redact_text(logged)
        assert credential.secret not in masked and MASK in masked, masked


@pytest.mark.parametrize("credential", CREDENTIALS, ids=[c.id for c in CREDENTIALS])
def test_a_credential_among_other_lines_keeps_the_lines_around_it(
        credential: Credential) -> None:
    text = f"first line\n{credential.text}\nlast line"
    kept = redact_text(text, keep_lines=True).split("\n")
    assert len(kept) == text.count("\n") + 1
    assert kept[0] == "first line"
    if not credential.kind.startswith("cut "):  # a cut key block is masked to the end
        assert kept[-1] == "last line"
    assert credential.secret not in "\n".join(kept)


@pytest.mark.parametrize("run", ["ab_", "a-", "token_", "password_", "x.y"])
def test_long_runs_of_name_characters_take_linear_time(run: str) -> None:
    """A tool result of 60 KB like ``ab_ab_ab_...`` took minutes (every start of a name
    was scanned to the end of the run); the names around a keyword are bounded now."""
    text = run * (60_000 // len(run))
    started = time.perf_counter()
    assert redact_text(text) == text
    assert time.perf_counter() - started < 5.0


@pytest.mark.parametrize("ordinary", ORDINARY)
def test_ordinary_text_is_left_alone(ordinary: str) -> None:
    assert redact_text(ordinary) == ordinary


def test_env_files_are_recognised_and_their_values_masked() -> None:
    assert all(is_env_file(n) for n in (".env", ".env.local", "prod.env", ".envrc",
                                        ".env_prod", ".env-local", ".ENV.staging"))
    assert not any(is_env_file(n) for n in ("environment.py", "env.md", "venv"))
    assert mask_env_line("export DATABASE_HOST=db.internal") == "export DATABASE_HOST=" + MASK
    assert mask_env_line("# a comment = kept") == "# a comment = kept"
    assert mask_env_line("") == ""


def test_a_token_in_the_first_message_never_reaches_the_index_or_the_listing(
        project: Project, scripted: list[ScriptItem]) -> None:
    token = sample("github token").text
    scripted.append(text("noted"))
    done = project.nonoka("run", f"use {token} to push")
    assert done.returncode == 0, done.stderr
    [record] = project.records()
    assert token not in record.title and MASK in record.title
    listed = project.nonoka("sessions", "list")
    shown = project.nonoka("sessions", "show", record.session_id, "--json")
    for out in (listed.stdout, shown.stdout):
        assert token not in out


# -- the gates: a pattern is skipped only where it cannot match ------------------------------

_PIECES = (
    *(c.text for c in CREDENTIALS), *ORDINARY,
    "api_key", "Api-Key", "ACCESS_KEY", "secret", "token", "credentials", "password",
    "passphrase", "pass_phrase", "PassWd", "DB_", "_url", "=", ": ", ":", "\\\"", "\"", "'",
    " ", "\t", "\n", "\r\n", "abcdEFGH1234xyz", "0123456789", "12345678", "1234",
    "AAbbCCddEEff00112233445566778899_-x", "sk-", "sk_live_",
    "ghp_", "xoxb-", "AKIA", "ASIA", "eyJ", ".", "-----BEGIN ", "RSA ", "PRIVATE KEY",
    "-----", "-----END ", "Private-Lines: 2", "machine", " login ", "Authorization",
    "Bearer ", "basic ", "https://", "user:", "@", "hooks.slack.com/services/",
    "discord.com/api/webhooks/", "AccountKey=", "SharedAccessSignature=", "?sig=",
    "\u0130", "\u0131", "\u017f", "\u212a", "é", "ß", "[redacted]",
)


def _every_pattern(text: str, keep_lines: bool) -> str:
    """What the patterns give with no gate in front of them."""
    for pattern, replacement, _gate in redact_module._patterns():
        text = pattern.sub(redact_module._with_lines(replacement) if keep_lines
                           else replacement, text)
    return text


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=14).map("".join),
       st.booleans())
def test_a_gate_skips_a_pattern_only_where_it_would_mask_nothing(text: str,
                                                                 keep_lines: bool) -> None:
    assert redact_module._mask_patterns(text, keep_lines=keep_lines) \
        == _every_pattern(text, keep_lines)


@pytest.mark.parametrize("text", [
    "my \u0130\u0130-api_key= longvaluehere", "a pa\u017f\u017fword: phrase here",
    "AP\u0130_KEY=abcdefgh1234", "API_\u212aEY=abcdefgh1234", "machine h login u pa\u017fsword p",
    "Authorizat\u0131on: Bearer abcdefghijkl",
    "bot x12345678:AAbbCCddEEff00112233445566778899_-x",
    "my_pass_phrase_" + "b" * 40 + " = hunter2hunter2", "api_key_" + "a" * 40 + ": abcdefgh",
    "PASSWORD\t: a phrase", 'pass_phrase\\": \\"a phrase\\"',
])
def test_the_edges_of_a_gate_open_it(text: str) -> None:
    """Texts a gate lets in only just: letters ``(?i)`` takes for ASCII ones, a bot
    token's eight digits, a setting's longest name."""
    assert redact_text(text) == _every_pattern(text, False)
    assert redact_text(text) != text
