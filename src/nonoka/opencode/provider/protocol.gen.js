// Generated from src/nonoka/protocol/schema.json by `python -m nonoka.protocol.generate`:
// do not edit. The bridge protocol's types (docs/protocol.md); the behaviour that uses
// them is in protocol.ts.
/** The protocol version these types describe. */
export const PROTOCOL_VERSION = "1";
/** One frame (line) may be this long, terminator not counted: the bridge's default. */
export const DEFAULT_MAX_FRAME_BYTES = 16777216;
/** Deepest nesting of arrays and objects a bridge accepts. */
export const MAX_NESTING = 100;
