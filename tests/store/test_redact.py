"""What the event log's redaction catches before anything is written."""

from __future__ import annotations

import pytest

from nonoka.redact import redact


@pytest.mark.parametrize(("text", "secret"), [
    ("Authorization: Bearer sk-live-1234567890abcdef", "sk-live-1234567890abcdef"),
    ("OPENAI_API_KEY=abcd1234efgh5678", "abcd1234efgh5678"),
    ('{"api_key": "hunter22hunter22"}', "hunter22hunter22"),
    ("failed with key sk-proj-ABCDEFGH12345678 at https://x", "sk-proj-ABCDEFGH12345678"),
    ("DEEPSEEK_TOKEN: t0k3n-value-here", "t0k3n-value-here"),
])
def test_secrets_are_masked_in_text(text: str, secret: str) -> None:
    masked = redact(text)
    assert secret not in masked and "[redacted]" in masked


def test_secret_fields_and_plain_text() -> None:
    data = {"headers": {"Authorization": "Bearer abcdefgh12345678"}, "api_key": "k" * 12,
            "message": "the model said hello", "tokens": 42}
    masked = redact(data)
    assert masked["headers"]["Authorization"] == "[redacted]"
    assert masked["api_key"] == "[redacted]"
    assert masked["message"] == "the model said hello" and masked["tokens"] == 42
