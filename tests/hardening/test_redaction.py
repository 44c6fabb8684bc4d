"""One redaction for every stored and printed field, against a table of credential shapes.

The tokens are fake and assembled from parts at run time, so no scanner mistakes this
file for a leak; each has the shape of the real thing.
"""

from __future__ import annotations

import base64

import pytest

from nonoka.redact import MASK, is_env_file, mask_env_line, redact, redact_text
from nonoka.testing import text
from tests.cli.conftest import Project
from tests.conftest import ScriptItem


def _j(*parts: str) -> str:
    return "".join(parts)


_ALNUM = "Q7x9Lm2Np4Rs6Tv8Wy0Za1Bc3De5Fg7Hj9Kk2Mn4Pq6"
_JWT = ".".join((_j("eyJ", "hbGciOiJIUzI1NiJ9"), _j("eyJ", "zdWIiOiIxMjM0NTY3ODkwIn0"),
                 "dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"))
_PEM_BODY = "MIIEowIBAAKCAQEA" + _ALNUM + "\n" + _ALNUM
_BASIC = base64.b64encode(b"admin:" + _ALNUM[:12].encode()).decode()

CREDENTIALS: list[tuple[str, str, str]] = [
    # (kind, text as it would appear, the secret part that must disappear)
    ("openai key", _j("key sk", "-proj-", _ALNUM[:24]), _ALNUM[:24]),
    ("anthropic key", _j("sk", "-ant-api03-", _ALNUM[:30]), _ALNUM[:30]),
    ("aws access key id", _j("AKIA", "IOSFODNN7EXAMPLE"), "IOSFODNN7EXAMPLE"),
    ("aws secret key", _j("aws_secret_access_key = ", "wJalrXUtnFEMI/K7MDENG/", _ALNUM[:18]),
     "wJalrXUtnFEMI/K7MDENG/"),
    ("google api key", _j("AIza", "Sy", _ALNUM[:33]), _ALNUM[:33]),
    ("stripe secret", _j("sk", "_live_", _ALNUM[:24]), _ALNUM[:24]),
    ("stripe restricted", _j("rk", "_test_", _ALNUM[:24]), _ALNUM[:24]),
    ("stripe webhook", _j("whsec", "_", _ALNUM[:32]), _ALNUM[:32]),
    ("github token", _j("gh", "p_", _ALNUM[:36]), _ALNUM[:36]),
    ("github fine-grained", _j("github", "_pat_", _ALNUM[:22], "_", _ALNUM[:20]), _ALNUM[:22]),
    ("gitlab token", _j("gl", "pat-", _ALNUM[:20]), _ALNUM[:20]),
    ("npm token", _j("np", "m_", _ALNUM[:36]), _ALNUM[:36]),
    ("hugging face", _j("h", "f_", _ALNUM[:34]), _ALNUM[:34]),
    ("slack token", _j("xo", "xb-", "1234567890-", _ALNUM[:24]), _ALNUM[:24]),
    ("jwt", f"session={_JWT}; path=/", _JWT.split(".")[2]),
    ("pem private key", _j("-----BEGIN RSA PRIVATE ", "KEY-----\n", _PEM_BODY,
                           "\n-----END RSA PRIVATE ", "KEY-----"), _ALNUM),
    ("cut pem private key", _j("-----BEGIN PRIVATE ", "KEY-----\n", _PEM_BODY[:40]),
     _PEM_BODY[16:40]),
    ("postgres url", _j("postgresql://app:", "Sup3r-S3cret", "@db.example.com:5432/prod"),
     "Sup3r-S3cret"),
    ("redis url", _j("redis://:", "hunter2hunter2", "@cache:6379/0"), "hunter2hunter2"),
    ("basic auth header", _j("Authorization: Basic ", _BASIC), _BASIC),
    ("bearer header", _j("Authorization: Bearer ", _ALNUM[:20]), _ALNUM[:20]),
    ("basic auth alone", _j("curl -H 'x' --header Basic ", _BASIC), _BASIC),
    ("password setting", _j("DB_PASSWORD=", "correct-horse-9"), "correct-horse-9"),
    ("json secret", _j('{"client_secret": "', _ALNUM[:16], '"}'), _ALNUM[:16]),
]


@pytest.mark.parametrize(("kind", "text", "secret"), CREDENTIALS,
                         ids=[kind for kind, _, _ in CREDENTIALS])
def test_every_credential_shape_is_masked(kind: str, text: str, secret: str) -> None:
    masked = redact_text(text)
    assert secret not in masked, (kind, masked)
    assert MASK in masked
    assert redact({"nested": [text]}) == {"nested": [masked]}


@pytest.mark.parametrize("ordinary", [
    "basic understanding of the codebase", "we spent 1200 input_tokens: 1234 here",
    "tokens: 12 in / 5 out", "https://example.com/path?q=1", "max_tokens=4096",
    "the password policy is documented", "see docs/secret-management.md",
])
def test_ordinary_text_is_left_alone(ordinary: str) -> None:
    assert redact_text(ordinary) == ordinary


def test_env_files_are_recognised_and_their_values_masked() -> None:
    assert all(is_env_file(n) for n in (".env", ".env.local", "prod.env", ".envrc"))
    assert not any(is_env_file(n) for n in ("environment.py", "env.md", "venv"))
    assert mask_env_line("export DATABASE_HOST=db.internal") == "export DATABASE_HOST=" + MASK
    assert mask_env_line("# a comment = kept") == "# a comment = kept"
    assert mask_env_line("") == ""


def test_a_token_in_the_first_message_never_reaches_the_index_or_the_listing(
        project: Project, scripted: list[ScriptItem]) -> None:
    token = _j("gh", "p_", _ALNUM[:36])
    scripted.append(text("noted"))
    done = project.nonoka("run", f"use {token} to push")
    assert done.returncode == 0, done.stderr
    [record] = project.records()
    assert token not in record.title and MASK in record.title
    listed = project.nonoka("sessions", "list")
    shown = project.nonoka("sessions", "show", record.session_id, "--json")
    for out in (listed.stdout, shown.stdout):
        assert token not in out
