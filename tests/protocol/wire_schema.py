"""Validation of frames against the committed JSON Schema (``schema.json``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "src" / "nonoka" / "protocol" / "schema.json"


@functools.cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(loaded)
    return loaded


@functools.cache
def _validator(definition: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": schema()["$defs"]})


def schema_errors(frame: Mapping[str, Any], definition: str) -> list[str]:
    """Why ``frame`` is not a valid ``definition`` (``Request``, ``Event``, …); empty if it is."""
    return [f"{'/'.join(map(str, e.absolute_path)) or '(frame)'}: {e.message}"
            for e in _validator(definition).iter_errors(frame)]
