"""Masking credentials: the one function every stored and printed field goes through.

The event log, the session index (titles, metadata) and everything the human commands
print pass through ``redact``, so a key pasted into a first message, echoed by an
endpoint or read from a file by a tool is masked the same way everywhere. Standard
library only; the patterns are compiled on first use, so importing this costs nothing.
"""

from __future__ import annotations

import os
import re
from functools import cache
from typing import Any

MASK = "[redacted]"
_MIN_SECRET = 8
"""Shorter environment values are not masked: they would blank out ordinary words."""
_SECRET_ENV_NAMES = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "PAT")
_KEYWORDS = (r"api[_-]?key|access[_-]?key|private[_-]?key|secret|token|password|passwd|"
             r"credentials?")
"""Names of settings that hold a secret (``Authorization`` has a pattern of its own)."""


@cache
def _patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    """``(pattern, replacement)`` pairs, most specific first."""
    return (
        # PEM private keys: the whole block, or what is left of it when cut short.
        (re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----"
                    r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|.*)", re.S),
         r"-----BEGIN \1PRIVATE KEY-----" + MASK),
        # Authorization headers, whatever the scheme (Basic, Bearer, Token, Digest...).
        (re.compile(r"(?i)\b(authorization\"?\s*[:=]\s*[\"']?)"
                    r"(?:(?:basic|bearer|token|digest|apikey)\s+)?[^\s\"',}]+"),
         r"\1" + MASK),
        (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + MASK),
        (re.compile(r"(?i)\b(basic)\s+(?=[A-Za-z0-9+/]*[0-9+/])[A-Za-z0-9+/]{12,}={0,2}"),
         r"\1 " + MASK),
        # Passwords in URLs: scheme://user:password@host.
        (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@\"']*:)[^\s@/\"']+@"),
         r"\1" + MASK + "@"),
        # JSON Web Tokens.
        (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
        # Well-known token formats: model providers, payments, forges, clouds, chat.
        (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}"
                    r"|\bwhsec_[A-Za-z0-9]{16,}"
                    r"|\bsk-[A-Za-z0-9_-]{8,}"
                    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
                    r"|\bglpat-[A-Za-z0-9_-]{20,}|\bATBB[A-Za-z0-9]{24,}"
                    r"|\bnpm_[A-Za-z0-9]{30,}|\bpypi-[A-Za-z0-9_-]{40,}|\bhf_[A-Za-z0-9]{30,}"
                    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_-]{35}"
                    r"|\bya29\.[0-9A-Za-z_-]{20,}"
                    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}|\bxapp-[A-Za-z0-9-]{10,}"), MASK),
        # NAME_API_KEY=value, "token": "...", aws_secret_access_key = ..., DB_PASSWORD: ...
        (re.compile(r"(?i)(?<![a-z0-9])([a-z0-9_.-]*(?:" + _KEYWORDS + r")"
                    r"(?:[_.-][a-z0-9_.-]*)?)(\"?\s*[:=]\s*[\"']?)(?!\d+\b)[^\s\"',}]{4,}"),
         r"\1\2" + MASK),
    )


@cache
def _key_names() -> re.Pattern[str]:
    return re.compile(r"(?i)(" + _KEYWORDS + r"|authorization)$")


_env_secrets: tuple[str, ...] | None = None


def _secret_env_values() -> tuple[str, ...]:
    """Values of this process's environment variables named like secrets, longest first.

    A key can reach the log in shapes no pattern foresees (an endpoint echoing it in an
    error, a tool printing its environment), so those values are masked exactly.
    """
    global _env_secrets
    if _env_secrets is None:
        found = {value for name, value in os.environ.items()
                 if name.upper().endswith(_SECRET_ENV_NAMES) and len(value) >= _MIN_SECRET}
        _env_secrets = tuple(sorted(found, key=len, reverse=True))
    return _env_secrets


def redact_text(text: str) -> str:
    """``text`` with every credential it recognises replaced by ``[redacted]``."""
    for secret in _secret_env_values():
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern, replacement in _patterns():
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any) -> Any:
    """Replace API keys, tokens and passwords anywhere in a JSON-like value; a mapping's
    value whose key is named like a secret is masked whole."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        names = _key_names()
        return {k: MASK if isinstance(k, str) and names.search(k) and isinstance(v, str)
                else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


_ENV_LINE = re.compile(r"^(\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_.-]*\s*[=:]\s*)(.*)$")


def is_env_file(name: str) -> bool:
    """``.env``, ``.env.local``, ``prod.env``, ``.envrc``: files that hold ``NAME=value``
    settings, usually secrets."""
    lowered = name.lower()
    return (lowered in (".env", ".envrc") or lowered.startswith(".env.")
            or lowered.endswith(".env"))


def mask_env_line(line: str) -> str:
    """``NAME=value`` with the value masked (comments and blank lines kept)."""
    match = _ENV_LINE.match(line)
    if match is None or not match.group(2).strip() or line.lstrip().startswith("#"):
        return line
    return match.group(1) + MASK
