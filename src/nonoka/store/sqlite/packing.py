"""Entry rows' and timeline rows' JSON as SQLite keeps it: deflated when that pays, read
back either way.

A ``session_entries`` row's ``entry_json`` is the entry's JSON text, as it always was,
or (``pack``: a row of at least ``MIN_SIZE`` bytes that deflate makes smaller by
``MIN_GAIN``) a BLOB holding the zlib stream (RFC 1950) of that text. SQLite's type
tells them apart: text is the JSON; a blob is a zlib stream, whose header says how it
was made, so rows written with other settings, or read by another version, still read
(``unpack``). The stream uses a 4 KiB window and ``DICTIONARY`` as its preset
dictionary (the JSON most entries repeat), and the header names the dictionary by its
checksum (``DICTIONARIES``): a later one can be added beside it.

An entry of a turn is about 700 bytes; a full-size deflate state costs more to set up
than to compress it (~150 µs against ~25 µs with the small window, bench/README.md), and
so does a full-size inflate state (unpacking takes ~6 µs). Everything computed over a
row (its digest chain, the search index's text, exports and copies) is over the JSON
text, never the stored bytes. SQL reads a row's text with the function ``entry_text``
(``register``), which each connection nonoka opens has. Timeline rows
(``events.data_json``) are kept the same way, with ``EVENT_DICTIONARY``.

Standard library only: the bridge's early dispatch reads entries before pydantic loads.
"""

from __future__ import annotations

import sqlite3
import zlib
from types import MappingProxyType

MIN_SIZE = 128
"""Shorter JSON is kept as text: deflate cannot win much there."""

MIN_GAIN = 16
"""Bytes a deflated row must save to be kept deflated."""

LEVEL = 6
"""zlib's default level: with the small window it costs no more than level 1 (about
25 µs a 700-byte entry, 4 ms for 100 KB, on a loaded machine) and makes entries 4%
smaller."""

WINDOW_BITS = 12
"""A 4 KiB window: an entry's repeats are near each other, and a small window is what
makes compressing a short text cheap (the state's set-up dominates)."""

MEMORY_LEVEL = 4
"""The compressor's hash table, small for the same reason."""

DICTIONARY = (
    b'"tool_call_id":"call_","is_error":false,"tool_calls":[{"id":"call_","name":"'
    b'","arguments":{"},"reasoning":[],"provider_metadata":{"nonoka_serve":{"id":"resp_'
    b'","finish":"stop","completed_at":17,"record":{"model":"openai:'
    b'","created_at":17,"previous_response_id":"resp_"}}},"usage":{"input_tokens":'
    b',"output_tokens":},"model":"},"tokens":{"role":"tool","content":"'
    b'{"role":"assistant","content":"{"role":"user","content":"the of and to a in is'
    b' that for it with as was on be "},"metadata":{},"tokens":'
)
"""The preset dictionary: keys and values most entries' JSON repeat (deflate looks for
matches in it first, which saves about a sixth of a turn's two entries). Never changed
once rows use it: a new dictionary is added to ``DICTIONARIES`` instead."""

EVENT_DICTIONARY = (
    b'{"tool":"","call_id":"call_","arguments":{},"is_error":false,"output":"'
    b'{"code":"","message":"{"new":false,"recovery_reason":null}'
    b'{"source":"serve /v1/chat/completions","serve /v1/messages","serve /v1/responses",'
    b'"messages":1,"model":"anthropic:openai:","stream":false,"store":true,'
    b'"previous_response_id":null,"tools":[],"process":"'
    b'{"id":"resp_","record":{"model":"openai:","created_at":17,"previous_response_id":'
    b'"resp_"},"request":"{"model":"openai:","input_tokens":,"output_tokens":,'
    b'"cost_usd":0.0}{"finish_reason":"stop","input_tokens":,"output_tokens":,'
    b'"cost_usd":null,"cache_read_tokens":0,"cache_write_tokens":0,"reasoning_tokens":0}'
)
"""The preset dictionary of timeline rows (``events.data_json``): the keys and values a
turn's events repeat. Never changed once rows use it, as ``DICTIONARY``."""

EVENT_MIN_SIZE = 32
"""Timeline rows are short, and their dictionary makes even short ones shorter (a
``nonoka serve`` turn's ``session`` row, 36 bytes of JSON, is 15 deflated)."""

DICTIONARIES: MappingProxyType[int, bytes] = MappingProxyType({
    zlib.adler32(DICTIONARY): DICTIONARY,
    zlib.adler32(EVENT_DICTIONARY): EVENT_DICTIONARY})
"""Every dictionary a stored row may name, by the checksum its header carries."""


def pack(text: str, dictionary: bytes = DICTIONARY, min_size: int = MIN_SIZE
         ) -> str | bytes:
    """What ``entry_json`` stores for an entry whose JSON is ``text`` (with
    ``EVENT_DICTIONARY`` and ``EVENT_MIN_SIZE``: what ``events.data_json`` stores)."""
    if len(text) < min_size // 4:
        return text
    raw = text.encode()
    if len(raw) < min_size:
        return text
    deflate = zlib.compressobj(LEVEL, zlib.DEFLATED, WINDOW_BITS, MEMORY_LEVEL,
                               zdict=dictionary)
    packed = deflate.compress(raw) + deflate.flush()
    return packed if len(packed) <= len(raw) - MIN_GAIN else text


def unpack(value: object) -> str:
    """The JSON text of a stored ``entry_json``. A blob that is not a stream ``pack``
    wrote (a damaged row, or one another program wrote) comes back as its bytes read as
    UTF-8, with replacement characters: it then fails to decode as an entry, as any
    damaged row does, and is reported where it is read."""
    if isinstance(value, str):
        return value
    if not isinstance(value, bytes):
        return "" if value is None else str(value)
    try:
        return _inflate(value).decode()
    except (zlib.error, UnicodeDecodeError, KeyError, IndexError):
        return value.decode(errors="replace")


def _inflate(value: bytes) -> bytes:
    if value[1] & 0x20:  # FDICT: the header names its preset dictionary
        inflate = zlib.decompressobj(0, zdict=DICTIONARIES[int.from_bytes(value[2:6], "big")])
    else:
        inflate = zlib.decompressobj(0)
    out = inflate.decompress(value) + inflate.flush()
    if not inflate.eof or inflate.unused_data:
        raise zlib.error("not one whole zlib stream")
    return out


class _LastText:
    """``entry_text`` for one connection: the search view asks for a row's text several
    times in one expression, so the last blob's text is kept."""

    def __init__(self) -> None:
        self._blob = b""
        self._text = ""

    def __call__(self, value: object) -> str:
        if isinstance(value, bytes):
            if value != self._blob:
                self._text = unpack(value)
                self._blob = value
            return self._text
        return unpack(value)


def register(db: sqlite3.Connection) -> None:
    """Give a ``sqlite3`` connection the SQL function ``entry_text(value)``: the JSON
    text of an entry row's ``entry_json`` or a timeline row's ``data_json``, whichever
    way it is stored."""
    db.create_function("entry_text", 1, _LastText(), deterministic=True)
