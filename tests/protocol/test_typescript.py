"""The TypeScript generator: what each schema construct becomes, and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from nonoka.protocol.typescript import HEADER, UnsupportedSchemaError, render

SCHEMA: dict[str, Any] = {
    "x-protocol-version": "7",
    "$defs": {
        "Colour": {"description": "A colour.", "type": "string", "enum": ["red", "green"]},
        "Code": {"type": "string", "oneOf": [
            {"const": "a", "description": "the first"}, {"const": "b"}]},
        "Shape": {
            "description": "A */ shape.",
            "type": "object",
            "properties": {
                "type": {"const": "shape", "type": "string"},
                "colour": {"$ref": "#/$defs/Colour", "description": "Its colour."},
                "sides": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "codes": {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/Code"},
                                                               {"type": "null"}]}},
                "extra": {"type": "object", "additionalProperties": True},
                "scores": {"type": "object", "additionalProperties": {"type": "number"}},
                "anything": {},
                "odd-name": {"type": "boolean"},
            },
            "required": ["type", "colour", "odd-name"],
        },
        "Thing": {"oneOf": [{"$ref": "#/$defs/Shape"}, {"$ref": "#/$defs/Colour"}]},
    },
}


def test_each_construct_becomes_its_typescript() -> None:
    assert render(SCHEMA) == HEADER + '''
/** The protocol version these types describe. */
export const PROTOCOL_VERSION = "7";

/** A colour. */
export type Colour =
  | "red"
  | "green";

export type Code =
  /** the first */
  | "a"
  | "b";

/** A *\\/ shape. */
export interface Shape {
  type: "shape";
  /** Its colour. */
  colour: Colour;
  sides?: number | null;
  tags?: string[];
  codes?: (Code | null)[];
  extra?: Record<string, unknown>;
  scores?: Record<string, number>;
  anything?: unknown;
  "odd-name": boolean;
}

export type Thing =
  | Shape
  | Colour;
'''


@pytest.mark.parametrize("spec", [
    {"$ref": "https://example.com/other.json"},
    {"type": "object", "properties": {"x": {"type": "string"}}},
    {"not": {"type": "string"}},
    {"type": "date"},
])
def test_a_construct_it_does_not_know_is_refused(spec: dict[str, Any]) -> None:
    schema = {"$defs": {"Holder": {"type": "object", "properties": {"x": spec}}}}
    with pytest.raises(UnsupportedSchemaError):
        render(schema)


def test_a_model_read_and_written_differently_gets_two_valid_names() -> None:
    # pydantic names a model used in a request and in an event ``Model-Input`` / ``-Output``.
    schema = {"$defs": {
        "Part-Input": {"type": "object", "properties": {"text": {"type": "string"}}},
        "Part-Output": {"type": "object", "properties": {"text": {"type": "string"}},
                        "required": ["text"]},
        "Holder": {"type": "object", "properties": {
            "parts": {"type": "array", "items": {"$ref": "#/$defs/Part-Input"}}}}}}
    rendered = render(schema)
    assert "export interface PartInput {" in rendered
    assert "export interface PartOutput {" in rendered
    assert "parts?: PartInput[];" in rendered
    assert "Part-" not in rendered
