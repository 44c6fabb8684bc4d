"""TypeScript types from the protocol's JSON Schema, for the OpenCode provider.

``packages/nonoka-opencode-provider/src/protocol.gen.ts`` is written from ``schema.json``
by ``python -m nonoka.protocol.generate``, so the provider's types cannot drift from the
models. Only the JSON Schema that ``nonoka.protocol.schema`` produces is supported: an
unknown construct raises rather than being guessed at.

Every definition becomes an exported type: an object with properties an ``interface``
(an optional property may be absent; ``null`` is allowed only where the schema allows
it), anything else a type alias (enums and unions as unions of literals or types).
The root's ``x-`` values become constants.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

HEADER = """\
// Generated from src/nonoka/protocol/schema.json by `python -m nonoka.protocol.generate`:
// do not edit. The bridge protocol's types (docs/protocol.md); the behaviour that uses
// them is in protocol.ts.
"""

_CONSTANTS = (
    ("x-protocol-version", "PROTOCOL_VERSION", "The protocol version these types describe."),
    ("x-max-frame-bytes", "DEFAULT_MAX_FRAME_BYTES",
     "One frame (line) may be this long, terminator not counted: the bridge's default."),
    ("x-max-nesting", "MAX_NESTING", "Deepest nesting of arrays and objects a bridge accepts."),
)
_PRIMITIVES = {"string": "string", "integer": "number", "number": "number",
               "boolean": "boolean", "null": "null"}
_REF = "#/$defs/"


class UnsupportedSchemaError(ValueError):
    """The schema uses something this generator does not translate."""


def render(schema: Mapping[str, Any]) -> str:
    """The ``protocol.gen.ts`` text for ``schema``."""
    parts = [HEADER]
    for key, name, doc in _CONSTANTS:
        if key in schema:
            parts.append(f"{_doc(doc, '')}export const {name} = {json.dumps(schema[key])};\n")
    for name, definition in schema.get("$defs", {}).items():
        parts.append(_declaration(name, definition))
    return "\n".join(parts)


def _declaration(name: str, definition: Mapping[str, Any]) -> str:
    doc = _doc(definition.get("description", ""), "")
    if definition.get("type") == "object" and "properties" in definition:
        required = set(definition.get("required", ()))
        lines = [f"{doc}export interface {_name(name)} {{"]
        for prop, spec in definition["properties"].items():
            mark = "" if prop in required else "?"
            lines.append(f"{_doc(spec.get('description', ''), '  ')}"
                         f"  {_key(prop)}{mark}: {_type(spec)};")
        lines.append("}")
        return "\n".join(lines) + "\n"
    return f"{doc}export type {_name(name)} ={_alias_body(definition)};\n"


def _alias_body(definition: Mapping[str, Any]) -> str:
    """A union written one member a line (with each value's meaning), else inline."""
    options = definition.get("oneOf") or definition.get("anyOf")
    if options is None and "enum" in definition:
        options = [{"const": value} for value in definition["enum"]]
    if options is None or len(options) < 2:
        return f" {_type(definition)}"
    return "".join(f"\n{_doc(option.get('description', ''), '  ')}  | {_type(option)}"
                   for option in options)


def _type(spec: Mapping[str, Any]) -> str:
    if "$ref" in spec:
        ref = spec["$ref"]
        if not ref.startswith(_REF):
            raise UnsupportedSchemaError(f"only local references are supported: {ref}")
        return _name(str(ref[len(_REF):]))
    if "const" in spec:
        return json.dumps(spec["const"], ensure_ascii=False)
    if "enum" in spec:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"])
    options = spec.get("oneOf") or spec.get("anyOf")
    if options is not None:
        return " | ".join(_type(option) for option in options)
    kind = spec.get("type")
    if kind == "array":
        item = _type(spec.get("items", {}))
        return f"({item})[]" if " | " in item else f"{item}[]"
    if kind == "object":
        extra = spec.get("additionalProperties", True)
        if "properties" in spec:
            raise UnsupportedSchemaError("an inline object with properties needs a definition")
        value = "unknown" if extra is True or extra == {} else _type(extra)
        return f"Record<string, {value}>"
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind is None and not spec.keys() - {"description", "default", "title"}:
        return "unknown"  # any JSON value
    raise UnsupportedSchemaError(f"cannot translate {dict(spec)!r} to TypeScript")


def _name(definition: str) -> str:
    """A definition's name as a TypeScript identifier: pydantic names a model that reads
    and writes differently ``Model-Input`` / ``Model-Output``; the dash is dropped."""
    return "".join(c for c in definition if c.isalnum() or c in "_$")


def _key(name: str) -> str:
    return name if name.isidentifier() else json.dumps(name)


def _doc(text: str, indent: str) -> str:
    text = text.replace("*/", "*\\/").strip()
    return f"{indent}/** {text} */\n" if text else ""
