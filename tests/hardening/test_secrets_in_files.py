"""What ``nonoka run``'s tools hand the model from a file holding a credential.

A file is redacted whole, never a line at a time: a private key's body goes with its
``BEGIN`` line, whichever window of lines is asked for. Files are recognised by their
name (``.env_prod``, ``id_ed25519``) and by their content (only ``NAME=value`` lines, a
PuTTY key). ``search_text`` matches what ``read_file`` shows, so a masked value cannot be
found by guessing pieces of it. The tools run in-process on real files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nonoka.redact import MASK
from nonoka.runtime.tools import Tool
from tests.hardening.test_project_tools import tools_of, use
from tests.support.credentials import CREDENTIALS, Credential

_RSA_BODY = [f"MIIEpAIBAAKCAQEA{n:02d}" + "Zk4Qw9Lp2Xv7Rt1Ns6Hm3Jc8Bf5Gd0Ya" for n in range(12)]
_PRIVATE = "PRIVATE " + "KEY"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    return project


def _lines_of(tools: dict[str, Tool], path: str, total: int) -> list[str]:
    """Every one-line window of ``path``, as the model could ask for them one by one."""
    return [use(tools["read_file"], path=path, offset=n, limit=1)[0] for n in range(total)]


@pytest.mark.parametrize("credential", CREDENTIALS, ids=[c.id for c in CREDENTIALS])
def test_no_window_of_a_file_shows_a_credential(root: Path, credential: Credential) -> None:
    text = f"notes for the deploy\n{credential.text}\nthe end\n"
    (root / "notes.md").write_text(text)
    tools = tools_of(root)
    whole, error = use(tools["read_file"], path="notes.md")
    assert not error and credential.secret not in whole and MASK in whole, whole
    assert whole.startswith("notes for the deploy\n")
    for window in _lines_of(tools, "notes.md", text.count("\n")):
        assert credential.secret not in window, window
    found, _ = use(tools["search_text"], text=credential.secret)
    assert found.startswith("no line contains"), found


def test_a_window_inside_a_private_key_shows_none_of_it(root: Path) -> None:
    key = [f"-----BEGIN RSA {_PRIVATE}-----", *_RSA_BODY, f"-----END RSA {_PRIVATE}-----"]
    (root / "deploy.pem").write_text("\n".join(["# the deploy key", *key, "after = 1"]) + "\n")
    tools = tools_of(root)
    middle, error = use(tools["read_file"], path="deploy.pem", offset=5, limit=3)
    assert not error and middle.splitlines()[:3] == [MASK] * 3, middle
    tail, _ = use(tools["read_file"], path="deploy.pem", offset=12, limit=5)
    assert tail.splitlines() == [MASK, MASK, MASK, "after = 1"]  # body, body, END
    whole, _ = use(tools["read_file"], path="deploy.pem")
    assert not any(line in whole for line in _RSA_BODY)
    assert whole.splitlines()[1] == f"-----BEGIN RSA {_PRIVATE}-----{MASK}"
    assert len(whole.splitlines()) == len(key) + 2  # line numbers kept for offsets
    for piece in (_RSA_BODY[3][:20], "Zk4Qw9Lp2X"):
        assert use(tools["search_text"], text=piece)[0].startswith("no line contains")


def test_a_pgp_private_key_block_is_masked_whole(root: Path) -> None:
    body = ["Version: GnuPG v2", "", "lQOYBGXyZk4QAQgAw9Lp2Xv7Rt1Ns6Hm3Jc8Bf5Gd0Ya",
            "Rt1Ns6Hm3Jc8Bf5Gd0YaZk4Qw9Lp2Xv7", "=Qp7x"]
    lines = [f"-----BEGIN PGP {_PRIVATE} BLOCK-----", *body,
             f"-----END PGP {_PRIVATE} BLOCK-----"]
    (root / "backup.asc").write_text("\n".join(lines) + "\n")
    tools = tools_of(root)
    whole, _ = use(tools["read_file"], path="backup.asc")
    for window in (whole, *_lines_of(tools, "backup.asc", len(lines))):
        assert not any(secret in window for secret in body[2:]), window


@pytest.mark.parametrize("name", [".env", ".env_prod", ".env-local", ".env.staging",
                                  "prod.env", ".envrc"])
def test_env_files_are_known_by_name(root: Path, name: str) -> None:
    (root / name).write_text("# where the app runs\nDATABASE_HOST=db.internal\n"
                             "export REGION = eu-west-3\n")
    tools = tools_of(root)
    shown, _ = use(tools["read_file"], path=name)
    assert shown.splitlines() == ["# where the app runs", f"DATABASE_HOST={MASK}",
                                  f"export REGION = {MASK}"]
    assert use(tools["search_text"], text="db.internal")[0].startswith("no line contains")


def test_a_settings_file_is_known_by_its_content(root: Path) -> None:
    (root / "deploy.vars").write_text("# production\nDATABASE_HOST=db.internal\n"
                                      "export UPSTREAM=https://api.internal\n")
    (root / "notes.txt").write_text("DATABASE_HOST=db.internal is where it runs\n"
                                    "and that is all\n")
    tools = tools_of(root)
    shown, _ = use(tools["read_file"], path="deploy.vars")
    assert shown.splitlines() == ["# production", f"DATABASE_HOST={MASK}",
                                  f"export UPSTREAM={MASK}"]
    prose, _ = use(tools["read_file"], path="notes.txt")
    assert "db.internal" in prose  # prose with an assignment in it is not a settings file


@pytest.mark.parametrize(("name", "content"), [
    ("id_ed25519", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE\nbm9uZQAAAAAAAAABAAAAMwAAAAtz\n"),
    ("signing.key", "Zk4Qw9Lp2Xv7Rt1Ns6Hm3Jc8Bf5Gd0Ya\n"),
    ("server", "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 1\n"
               "AAAAC3NzaC1lZDI1NTE5AAAAIA\nPrivate-Lines: 1\nAAAAIQCZk4Qw9Lp2Xv7Rt1Ns6Hm3\n"
               "Private-MAC: 5b1f\n"),
])
def test_key_files_are_masked_whole(root: Path, name: str, content: str) -> None:
    (root / name).write_text(content)
    tools = tools_of(root)
    shown, error = use(tools["read_file"], path=name)
    assert not error and set(shown.splitlines()) == {MASK}, shown
    assert use(tools["search_text"], text="Zk4Qw9")[0].startswith("no line contains")


def test_netrc_and_pgpass_passwords_are_masked(root: Path) -> None:
    (root / ".netrc").write_text("machine a.example.com\n  login bob\n  password Tr5netrcKx9\n")
    (root / ".pgpass").write_text("db.internal:5432:app:bob:Pg7pass:word\n")
    tools = tools_of(root)
    netrc, _ = use(tools["read_file"], path=".netrc", offset=2, limit=1)
    assert netrc == f"  password {MASK}"
    pgpass, _ = use(tools["read_file"], path=".pgpass")
    assert pgpass == f"db.internal:5432:app:bob:{MASK}"
