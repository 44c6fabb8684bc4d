"""What every session index and event log must do: keep and find the same rows.

``RecordStoreSuite`` needs a ``records`` fixture: a ``RecordsHarness`` whose ``store``
implements ``SessionIndex`` and ``EventLog`` and whose ``reopen()`` gives another
instance over the same data.
"""

from __future__ import annotations

import pytest

from nonoka.store.records import AppendsTogether, SessionRecord, UsageSummary
from nonoka.testing.conformance.harness import RecordsHarness, RecordStore

T0 = 1_700_000_000.0


def _record(session_id: str, last_active: float = T0, **metadata: object) -> SessionRecord:
    return SessionRecord(session_id=session_id, created_at=T0, last_active=last_active,
                         metadata=metadata)


async def _add(store: RecordStore, *records: SessionRecord) -> None:
    for record in records:
        await store.upsert_session(record)


def _ids(records: list[SessionRecord]) -> list[str]:
    return [r.session_id for r in records]


SECRET = "sk-proj-A1b2C3d4E5f6G7h8"


class RecordStoreSuite:
    """Behaviour every ``SessionIndex`` and ``EventLog`` shows.

    Subclass it as ``Test...`` where a ``records`` fixture (a ``RecordsHarness``) is
    visible; each test then runs once per value of that fixture.
    """

    pytestmark = pytest.mark.asyncio  # every test is async; any asyncio_mode runs them

    # -- session index ----------------------------------------------------------------

    async def test_every_field_round_trips(self, records: RecordsHarness) -> None:
        record = SessionRecord(
            session_id="4f1c9a2e-0000-4000-8000-000000000001",
            title="Fix the flaky test — «ünïcode» 🚀",
            model="openai:gpt-4o-mini",
            created_at=T0 + 0.123456789,
            last_active=T0 + 3600.5,
            status="paused",
            turn_count=7,
            message_count=31,
            input_tokens=123_456_789_012,
            output_tokens=4321,
            cost_usd=0.1 + 0.2,
            metadata={"conversation_key": "ab" * 32, "purpose": "chat", "cwd": "/w/p",
                      "nested": {"list": [1, 2.5, None, True, "x"], "empty": {}}},
        )
        await records.store.upsert_session(record)
        assert await records.store.get_session(record.session_id) == record
        assert await records.store.get_session("missing") is None
        reopened = await records.reopen()
        assert await reopened.get_session(record.session_id) == record

    async def test_update_keeps_created_at(self, records: RecordsHarness) -> None:
        store = records.store
        await store.upsert_session(_record("s1", conversation_key="k"))
        update = SessionRecord(session_id="s1", title="renamed", model="m", created_at=T0 + 999,
                               last_active=T0 + 50, status="completed", turn_count=2,
                               message_count=4, input_tokens=10, output_tokens=20, cost_usd=0.5,
                               metadata={"conversation_key": "k2"})
        await store.upsert_session(update)
        assert await store.get_session("s1") == update.model_copy(update={"created_at": T0})
        assert _ids(await store.find_by_conversation_key("k2")) == ["s1"]
        assert await store.find_by_conversation_key("k") == []

    async def test_listing_is_most_recent_first_with_limit(self, records: RecordsHarness) -> None:
        store = records.store
        await _add(store, *(_record(f"s{n}", T0 + n * 7 % 10) for n in range(10)))
        listed = await store.list_sessions()
        assert [r.last_active for r in listed] == sorted((r.last_active for r in listed),
                                                         reverse=True)
        assert len(listed) == 10
        assert _ids(await store.list_sessions(3)) == _ids(listed)[:3]
        assert await store.list_sessions(0) == []
        # Activity moves a session to the top.
        await store.upsert_session(_record(listed[-1].session_id, T0 + 100))
        assert _ids(await store.list_sessions(1)) == [listed[-1].session_id]

    async def test_listing_order_follows_every_kind_of_write(
            self, records: RecordsHarness) -> None:
        """Newest first, ties by id, after any mix of writes: one session's turns in a
        row (it stays on top), another session's turn, rows written with an older
        ``last_active`` (an import, a clock set back), equal times, deletions. The SQL
        engines keep the top row's place in the list between its turns (``list_order``);
        the order must not show it."""
        import random

        store = records.store
        # The top row's turns, then a row from between its first turn and its last.
        for turn_at in (10, 20, 30):
            await store.upsert_session(_record("s0", T0 + turn_at, conversation_key="k"))
        await store.upsert_session(_record("s1", T0 + 15, conversation_key="k"))
        assert _ids(await store.list_sessions(purpose=None)) == ["s0", "s1"]
        rng = random.Random(25)
        now = T0 + 30
        alive: dict[str, float] = {"s0": T0 + 30, "s1": T0 + 15}
        for step in range(120):
            sid = f"s{rng.randrange(6)}"
            kind = rng.random()
            if kind < 0.55:  # a turn: later than everything so far
                now += rng.choice((0.0, 0.5, 3.0))
                at = now
            elif kind < 0.8:  # an older time (an import, a clock set back)
                at = T0 + rng.uniform(0, max(now - T0, 1.0))
            elif kind < 0.9:  # the same time as another row
                at = rng.choice(list(alive.values())) if alive else now
            else:
                await store.delete_session_record(sid)
                alive.pop(sid, None)
                continue
            await store.upsert_session(_record(sid, at, conversation_key="k"))
            alive[sid] = at
            expected = sorted(alive, key=lambda s: (-alive[s], s))
            assert _ids(await store.list_sessions(50, purpose=None)) == expected, step
            assert _ids(await store.find_by_conversation_key("k")) == expected, step
        reopened = await records.reopen()
        assert _ids(await reopened.list_sessions(50, purpose=None)) == expected

    async def test_listing_filters_by_purpose(self, records: RecordsHarness) -> None:
        store = records.store
        await _add(store, _record("chat-1", T0 + 1), _record("title-1", T0 + 2, purpose="title"),
                   _record("chat-2", T0 + 3, purpose="chat"), _record("title-2", T0 + 4,
                                                                        purpose="title"))
        assert _ids(await store.list_sessions()) == ["chat-2", "chat-1"]
        assert _ids(await store.list_sessions(purpose="title")) == ["title-2", "title-1"]
        assert _ids(await store.list_sessions(purpose=None)) == ["title-2", "chat-2", "title-1",
                                                                  "chat-1"]
        assert _ids(await store.list_sessions(2, purpose=None)) == ["title-2", "chat-2"]

    async def test_prefix_lookup(self, records: RecordsHarness) -> None:
        store = records.store
        await _add(store, _record("abc-111", T0 + 1), _record("abc-222", T0 + 2),
                   _record("abd-333", T0 + 3), _record("ABC-444", T0 + 4))
        assert _ids(await store.find_sessions_by_prefix("abd")) == ["abd-333"]
        assert _ids(await store.find_sessions_by_prefix("abc-1")) == ["abc-111"]
        assert _ids(await store.find_sessions_by_prefix("abc")) == ["abc-222", "abc-111"]
        assert _ids(await store.find_sessions_by_prefix("ab", limit=2)) == ["abd-333", "abc-222"]
        assert _ids(await store.find_sessions_by_prefix("abc-111")) == ["abc-111"]
        assert await store.find_sessions_by_prefix("abc-1111") == []
        assert await store.find_sessions_by_prefix("zzz") == []

    @pytest.mark.parametrize("special", ["%", "_", "*", "?", "[", "]", "\\"])
    async def test_prefix_wildcards_are_literal(
            self, records: RecordsHarness, special: str) -> None:
        ids = [f"a{special}b", "axb", "a[x]b", "ab", "A%b"]
        await _add(records.store, *(_record(i) for i in ids))
        found = await records.store.find_sessions_by_prefix(f"a{special}")
        assert sorted(_ids(found)) == sorted(i for i in ids if i.startswith(f"a{special}"))

    async def test_conversation_key_lookup(self, records: RecordsHarness) -> None:
        store = records.store
        await _add(
            store,
            _record("old", T0 + 1, conversation_key="K"),
            _record("newest", T0 + 9, conversation_key="K"),
            _record("middle", T0 + 5, conversation_key="K", purpose="chat"),
            _record("title", T0 + 20, conversation_key="K", purpose="title"),
            _record("other", T0 + 30, conversation_key="K2"),
            _record("none", T0 + 40),
            _record("empty", T0 + 50, conversation_key=""),
        )
        assert _ids(await store.find_by_conversation_key("K")) == ["newest", "middle", "old"]
        assert _ids(await store.find_by_conversation_key("K", purpose="title")) == ["title"]
        assert _ids(await store.find_by_conversation_key("K2")) == ["other"]
        assert await store.find_by_conversation_key("K3") == []
        assert await store.find_by_conversation_key("") == []
        # The newest activity wins.
        await store.upsert_session(_record("old", T0 + 100, conversation_key="K"))
        assert _ids(await store.find_by_conversation_key("K"))[0] == "old"

    async def test_delete_removes_row_and_events(self, records: RecordsHarness) -> None:
        store = records.store
        await _add(store, _record("gone"), _record("kept"))
        for sid in ("gone", "kept"):
            await store.append_event(sid, "request", {"n": 1})
        assert await store.delete_session_record("gone") is True
        assert await store.get_session("gone") is None
        assert await store.list_events("gone") == []
        assert await store.usage_summary("gone") == UsageSummary()
        assert await store.delete_session_record("gone") is False
        assert await store.delete_session_record("never") is False
        assert await store.get_session("kept") is not None
        assert len(await store.list_events("kept")) == 1
        # A log without an index row is still removed.
        await store.append_event("orphan", "error", {})
        assert await store.delete_session_record("orphan") is True
        assert await store.list_events("orphan") == []
        # A new log under a deleted id starts again at 1.
        await store.append_event("gone", "request", {})
        assert [e.seq for e in await store.list_events("gone")] == [1]

    # -- event log --------------------------------------------------------------------

    async def test_events_in_order_with_increasing_seq(self, records: RecordsHarness) -> None:
        store = records.store
        kinds = ["request", "model_call", "tool_call", "tool_result", "warning", "error"]
        for n, kind in enumerate(kinds):
            await store.append_event("s1", kind, {"n": n, "text": f"event {n} ✓", "xs": [n, None]})
        events = await store.list_events("s1")
        assert [e.kind for e in events] == kinds
        assert [e.seq for e in events] == list(range(1, len(kinds) + 1))
        assert [e.data for e in events] == [
            {"n": n, "text": f"event {n} ✓", "xs": [n, None]} for n in range(len(kinds))
        ]
        assert all(e.session_id == "s1" for e in events)
        times = [e.at for e in events]
        assert times == sorted(times)
        assert times[0] > T0

    async def test_events_and_the_row_written_together(self, records: RecordsHarness
                                                       ) -> None:
        """``AppendsTogether`` (every engine nonoka ships): several entries, in order after
        the ones there, with the row; secrets masked as by ``append_event``; and seen so
        by another instance."""
        store = records.store
        assert isinstance(store, AppendsTogether)
        await store.append_event("s1", "request", {"n": 0})
        await store.append_events("s1", [("model_call", {"n": 1, "input_tokens": 3}),
                                         ("finish", {"n": 2, "key": SECRET})],
                                  record=_record("s1", T0 + 5, conversation_key="K"))
        await store.append_events("s1", [])  # nothing, and no row: nothing changes
        await store.append_events("s2", [], record=_record("s2"))  # a row alone
        reopened = await records.reopen()
        events = await reopened.list_events("s1")
        assert [(e.seq, e.kind, e.data["n"]) for e in events] == [
            (1, "request", 0), (2, "model_call", 1), (3, "finish", 2)]
        assert SECRET not in str(events[-1].data)
        assert (await reopened.usage_summary("s1")).input_tokens == 3
        assert [r.session_id for r in await reopened.find_by_conversation_key("K")] == ["s1"]
        assert await reopened.get_session("s2") is not None
        assert await reopened.list_events("s2") == []

    async def test_list_events_returns_the_newest_oldest_first(
            self, records: RecordsHarness) -> None:
        store = records.store
        for n in range(10):
            await store.append_event("s1", "request", {"n": n})
        assert [e.data["n"] for e in await store.list_events("s1", 3)] == [7, 8, 9]
        assert [e.seq for e in await store.list_events("s1", 3)] == [8, 9, 10]
        assert [e.data["n"] for e in await store.list_events("s1", 50)] == list(range(10))
        assert [e.data["n"] for e in await store.list_events("s1", 10)] == list(range(10))
        assert await store.list_events("s1", 0) == []
        assert await store.list_events("unknown") == []

    async def test_sessions_are_isolated(self, records: RecordsHarness) -> None:
        store = records.store
        for n in range(3):
            await store.append_event("a", "request", {"who": "a", "n": n})
            await store.append_event("b", "model_call", {"who": "b", "n": n, "input_tokens": 5})
        a, b = await store.list_events("a"), await store.list_events("b")
        assert [e.seq for e in a] == [e.seq for e in b] == [1, 2, 3]
        assert {e.data["who"] for e in a} == {"a"}
        assert {e.data["who"] for e in b} == {"b"}
        assert (await store.usage_summary("a")).model_calls == 0
        assert (await store.usage_summary("b")).input_tokens == 15

    async def test_data_persists_across_store_instances(self, records: RecordsHarness) -> None:
        await records.store.upsert_session(_record("s1", conversation_key="K"))
        await records.store.append_event("s1", "request", {"n": 0})
        other = await records.reopen()
        assert _ids(await other.find_by_conversation_key("K")) == ["s1"]
        await other.append_event("s1", "request", {"n": 1})
        await records.store.append_event("s1", "request", {"n": 2})
        for store in (records.store, other):
            events = await store.list_events("s1")
            assert [(e.seq, e.data["n"]) for e in events] == [(1, 0), (2, 1), (3, 2)]

    async def test_usage_summary_totals(self, records: RecordsHarness) -> None:
        store = records.store
        assert await store.usage_summary("s1") == UsageSummary()
        calls = [(100, 20, 0.001), (250, 40, 0.0025), (1000, 1, 0.1)]
        for tin, tout, cost in calls:
            await store.append_event("s1", "model_call",
                                     {"model": "m", "input_tokens": tin, "output_tokens": tout,
                                      "cost_usd": cost})
            await store.append_event("s1", "tool_call", {"name": "read", "input_tokens": 999})
        await store.append_event("s1", "model_call", {"model": "m"})  # a call without usage
        await store.append_event("s1", "model_call", {"input_tokens": "12", "output_tokens": True,
                                                      "cost_usd": None})  # not numbers: ignored
        await store.append_event("s1", "model_call", {"input_tokens": 3.0, "cost_usd": 1})
        await store.append_event("s1", "error", {"message": "boom", "cost_usd": 5})
        await store.append_event("s1", "warning", {"code": "w1"})
        await store.append_event("s1", "warning", {"code": "w2"})
        await store.append_event("s1", "request", {"output_tokens": 7})
        summary = await store.usage_summary("s1")
        assert summary.model_dump(exclude={"cost_usd"}) == {
            "model_calls": 6, "input_tokens": 1353, "output_tokens": 61,
            "tool_calls": 3, "errors": 1, "warnings": 2,
            "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0,
        }
        assert summary.cost_usd == pytest.approx(1.1035)
        reopened = await records.reopen()
        assert await reopened.usage_summary("s1") == summary

    async def test_secrets_are_redacted_before_writing(self, records: RecordsHarness) -> None:
        store = records.store
        await store.append_event("s1", "request", {
            "headers": {"Authorization": f"Bearer {SECRET}", "Content-Type": "application/json"},
            "raw": f"POST /v1/chat\nAuthorization: Bearer {SECRET}\n",
            "api_key": SECRET,
            "config": {"provider": {"apiKey": "plain-looking-value"}},
            "prompt": f"my key is {SECRET}, please keep it",
            "messages": [{"role": "user", "content": f"use {SECRET} for the call"}],
            "note": "task-force: 12 input_tokens, sk-1 is too short to be a key",
            "input_tokens": 12,
        })
        (event,) = await (await records.reopen()).list_events("s1")
        data = event.data
        assert SECRET not in repr(data)
        assert "plain-looking-value" not in repr(data)
        assert data["headers"] == {"Authorization": "[redacted]",
                                   "Content-Type": "application/json"}
        assert data["raw"].startswith("POST /v1/chat\nAuthorization: [redacted]")
        assert data["api_key"] == "[redacted]"
        assert data["config"] == {"provider": {"apiKey": "[redacted]"}}
        assert data["prompt"] == "my key is [redacted], please keep it"
        assert data["messages"] == [{"role": "user", "content": "use [redacted] for the call"}]
        assert data["note"] == "task-force: 12 input_tokens, sk-1 is too short to be a key"
        assert data["input_tokens"] == 12

    async def test_values_json_cannot_encode_are_stored_as_text(
            self, records: RecordsHarness) -> None:
        from datetime import UTC, datetime

        when = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
        await records.store.append_event("s1", "request", {"when": when, "tags": ("a", "b")})
        (event,) = await records.store.list_events("s1")
        assert event.data == {"when": str(when), "tags": ["a", "b"]}
