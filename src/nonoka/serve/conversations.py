"""The Conversations API over nonoka's sessions.

A conversation is a session: its items are the session's entries as items, in the
order they were stored (an entry's place in its session is the sequence; no clock
orders anything). ``conversation`` on ``POST /v1/responses`` runs the response at the
session's end, so its input and output become the conversation's next items. The
conversation's own record — its nonce, ``metadata``, when it was made, the items taken
out of it — rides on the session's index row (``serve_conversation``), with its owner.

Items are never rewritten: deleting one takes it out of the API and out of what later
responses of the conversation send the model (an entry is left out once every item of it
is deleted); deleting the conversation takes it out of the API and leaves its session,
and so its responses, as they are.

An item's id is the id its response gives it (``GET /v1/responses/{id}/input_items``, the
response's output) when a response of the conversation stored it or came before it;
items added before the conversation's first response have ids of the conversation's own
(a response id's form: the session, entry 0 and the conversation's nonce), which stay
theirs after responses follow. ``item_reference`` resolves both (``own_item`` the
latter, for the conversation's owner, while neither the item nor the conversation is
deleted).
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from nonoka.runtime.session import Session
from nonoka.serve.errors import invalid, not_found
from nonoka.serve.hosted import client_calls
from nonoka.serve.ids import ItemPlace, ResponsePoint, parse_response_id
from nonoka.serve.inputs import messages_of, resolved
from nonoka.serve.items import entry_items
from nonoka.serve.keys import LOCAL, OWNER_KEY, current_owner, owner_of_record
from nonoka.serve.record import stamp_of
from nonoka.state.entries import MemoryEntry
from nonoka.store.leases import hold_lease, lease_wait_from_env, new_lease_owner
from nonoka.store.records import SessionRecord
from nonoka.turn.journal import title_from

PREFIX = "conv_"
KEY = "serve_conversation"
"""The session index metadata key of a conversation's record."""
MAX_ITEMS = 20
"""Items one create or add call may bring."""
MAX_METADATA = 16
_ID = re.compile(r"conv_([0-9a-f]{32})([0-9a-f]{8})")


def parse_conversation_id(text: Any) -> tuple[str, str] | None:
    """``(session id, nonce)`` a conversation id names, or ``None``."""
    found = _ID.fullmatch(text) if isinstance(text, str) else None
    return (str(uuid.UUID(found.group(1))), found.group(2)) if found else None


def check_metadata(value: Any, param: str = "metadata") -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_METADATA or not all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
            for k, v in value.items()):
        raise invalid(f"metadata: at most {MAX_METADATA} pairs of strings (keys up to 64 "
                      "characters, values up to 512)", param)
    return dict(value)


def _items_given(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid("items must be a list", "items")
    if len(value) > MAX_ITEMS:
        raise invalid(f"at most {MAX_ITEMS} items can be added at once", "items")
    return value


class Found:
    """A conversation: its session's index row and its record."""

    def __init__(self, ident: str, record: SessionRecord) -> None:
        self.id = ident
        self.record = record
        self.data: dict[str, Any] = dict(record.metadata[KEY])

    @property
    def session_id(self) -> str:
        return self.record.session_id

    @property
    def deleted_items(self) -> list[str]:
        return list(self.data.get("deleted_items") or ())

    def resource(self) -> dict[str, Any]:
        return {"id": self.id, "object": "conversation",
                "created_at": int(self.data.get("created_at", 0)),
                "metadata": dict(self.data.get("metadata") or {})}


def _per_entry(entries: Sequence[MemoryEntry], session_id: str,
               nonce: str) -> list[list[dict[str, Any]]]:
    """Each entry's items, with the ids its response gives them (the latest response
    that starts at or before the entry; the conversation's own before any)."""
    starts: dict[int, ResponsePoint] = {}
    for entry in entries:
        stamp = stamp_of(entry)
        point = parse_response_id(stamp["id"]) if stamp is not None else None
        if point is not None and point.session_id == session_id:
            starts.setdefault(point.start, point)
    current = ResponsePoint(session_id, 0, nonce)
    out = []
    custom = client_calls(entries)
    for at, entry in enumerate(entries):
        current = starts.get(at, current)
        out.append(entry_items(entry, current, at - current.start, custom=custom))
    return out


def items_of(entries: Sequence[MemoryEntry], session_id: str, nonce: str,
             deleted: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The conversation's items, oldest first, less the deleted ones."""
    gone = set(deleted)
    return [item for items in _per_entry(entries, session_id, nonce) for item in items
            if item["id"] not in gone]


def hidden_entries(entries: Sequence[MemoryEntry], session_id: str, nonce: str,
                   deleted: Sequence[str]) -> set[int]:
    """The entries every item of which is deleted: left out of what the model is sent."""
    if not deleted:
        return set()
    gone = set(deleted)
    return {at for at, items in enumerate(_per_entry(entries, session_id, nonce))
            if items and all(item["id"] in gone for item in items)}


class Conversations:
    """The Conversations API of the stores a ``Responses`` serves."""

    def __init__(self, responses: Any) -> None:
        self.responses = responses
        self.stores = responses.stores

    async def create(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise invalid("the request body must be a JSON object")
        metadata = check_metadata(body.get("metadata"))
        messages = await self._messages(_items_given(body.get("items")))
        sid, nonce, now = str(uuid.uuid4()), secrets.token_hex(4), time.time()
        session = Session(sid)
        for message in messages:
            session.memory.append(MemoryEntry.from_message(message))
        await self.responses.runner.save_session(session)
        owner = current_owner()
        title = next((title_from(m.content) for m in messages
                      if m.role == "user" and m.content.strip()), "")
        record = SessionRecord(
            session_id=sid, title=title, created_at=now, last_active=now,
            message_count=len(messages), metadata={
                "purpose": "chat", "cwd": str(self.responses.project),
                "source": "nonoka serve",
                KEY: {"nonce": nonce, "metadata": metadata, "created_at": int(now)},
                **({OWNER_KEY: owner} if owner != LOCAL else {})})
        await self.stores.index.upsert_session(record)
        return Found(PREFIX + uuid.UUID(sid).hex + nonce, record).resource()

    async def find(self, ident: str) -> Found:
        """The conversation ``ident`` names, for this request's owner (else a 404, as
        for an id that never existed)."""
        parsed = parse_conversation_id(ident)
        found = await self._of(*parsed) if parsed else None
        if found is None:
            raise not_found("Conversation", ident)
        return found

    async def _of(self, session_id: str, nonce: str) -> Found | None:
        """The conversation of ``session_id`` with ``nonce``, for this request's owner."""
        record = await self.stores.index.get_session(session_id)
        data = record.metadata.get(KEY) if record is not None else None
        if record is None or not isinstance(data, dict) or data.get("nonce") != nonce or \
                data.get("deleted") or owner_of_record(record.metadata) != current_owner():
            return None
        return Found(PREFIX + uuid.UUID(session_id).hex + nonce, record)

    async def own_item(self, place: ItemPlace,
                       sessions: dict[str, Session | None]) -> dict[str, Any] | None:
        """The item ``place`` names when its id is one of a conversation's own (an item
        added before the conversation's first response): ``None`` for any other id,
        another owner's, a deleted item's or a deleted conversation's. ``sessions``:
        the sessions this request loaded, by id."""
        point = place.response
        found = await self._of(point.session_id, point.nonce) if point.start == 0 else None
        if found is None:
            return None
        session = await self.responses.loaded(point.session_id, sessions)
        entries = session.memory.entries if session is not None else ()
        if place.entry >= len(entries):
            return None
        wanted = point.item_id(f"{place.kind}_", place.offset, place.place)
        # an entry's id depends only on the responses that start at or before it
        return next((item for item in items_of(entries[:place.entry + 1], point.session_id,
                                               point.nonce, found.deleted_items)
                     if item["id"] == wanted), None)

    async def get(self, ident: str) -> dict[str, Any]:
        return (await self.find(ident)).resource()

    async def update(self, ident: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or "metadata" not in body:
            raise invalid("send the conversation's new metadata", "metadata")
        metadata = check_metadata(body["metadata"])
        return (await self._change(ident, {"metadata": metadata})).resource()

    async def delete(self, ident: str) -> dict[str, Any]:
        await self._change(ident, {"deleted": True})
        return {"id": ident, "object": "conversation.deleted", "deleted": True}

    async def _change(self, ident: str, changes: dict[str, Any]) -> Found:
        found = await self.find(ident)
        sid = found.session_id
        async with self.responses.locks.hold(sid):
            found = await self.find(ident)
            data = {**found.data, **changes}
            record = found.record.model_copy(update={
                "metadata": {**found.record.metadata, KEY: data}})
            await self.stores.index.upsert_session(record)
        return Found(ident, record)

    # -- items -------------------------------------------------------------------------------

    async def add_items(self, ident: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise invalid("the request body must be a JSON object")
        given = _items_given(body.get("items"))
        if not given:
            raise invalid("items must name at least one item", "items")
        messages = await self._messages(given)
        found = await self.find(ident)
        sid = found.session_id
        runner = self.responses.runner
        async with self.responses.locks.hold(sid), hold_lease(
                self.stores.leases, sid, new_lease_owner(), wait=lease_wait_from_env()):
            session = await runner.load_session(sid)
            if session is None:
                raise not_found("Conversation", ident)
            before = len(session.memory.entries)
            await runner.append_history(session, messages)
            entries = session.memory.entries
            record = await self.stores.index.get_session(sid)
            if record is not None:
                await self.stores.index.upsert_session(record.model_copy(update={
                    "message_count": len(entries), "last_active": time.time()}))
        nonce = found.data["nonce"]
        every = items_of(entries, sid, nonce)
        earlier = len(items_of(entries[:before], sid, nonce))
        added = every[earlier:]
        return {"object": "list", "data": added,
                "first_id": added[0]["id"] if added else None,
                "last_id": added[-1]["id"] if added else None, "has_more": False}

    async def _all_items(self, found: Found) -> list[dict[str, Any]]:
        session = await self.responses.runner.load_session(found.session_id)
        entries = session.memory.entries if session is not None else []
        return items_of(entries, found.session_id, found.data["nonce"], found.deleted_items)

    async def list_items(self, ident: str, query: Mapping[str, str]) -> dict[str, Any]:
        """``limit`` (1-100, 20), ``order`` (``desc`` by default), ``after`` (an id)."""
        items = await self._all_items(await self.find(ident))
        return page(items, query)

    async def get_item(self, ident: str, item_id: str) -> dict[str, Any]:
        for item in await self._all_items(await self.find(ident)):
            if item["id"] == item_id:
                return item
        raise not_found("Item", item_id)

    async def delete_item(self, ident: str, item_id: str) -> dict[str, Any]:
        found = await self.find(ident)
        if not any(item["id"] == item_id for item in await self._all_items(found)):
            raise not_found("Item", item_id)
        return (await self._change(ident, {
            "deleted_items": [*found.deleted_items, item_id]})).resource()

    async def _messages(self, items: list[Any]) -> list[Any]:
        sessions: dict[str, Any] = {}

        async def resolve(ident: str, param: str) -> dict[str, Any]:
            return dict(await self.responses._item(ident, param, sessions))

        return messages_of(await resolved(items, resolve))


def page(items: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    """A page of ``items`` (oldest first): ``order``, ``after``, ``limit``."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("order must be asc or desc", "order")
    if order == "desc":
        items = items[::-1]
    after = query.get("after")
    if after:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1:] if after in ids else []
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        raise invalid("limit must be an integer", "limit") from None
    if not 1 <= limit <= 100:
        raise invalid("limit must be between 1 and 100", "limit")
    chosen = items[:limit]
    return {"object": "list", "data": chosen,
            "first_id": chosen[0]["id"] if chosen else None,
            "last_id": chosen[-1]["id"] if chosen else None,
            "has_more": len(items) > limit}
