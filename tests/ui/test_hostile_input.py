"""Input meant to break the server: hostile messages and out-of-range query parameters
get a page or a 400, never a 500 or a stalled server."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

from tests.ui.harness import UiServer, stored_session


def test_hostile_messages_make_pages_not_500s_or_stalls(project: Path) -> None:
    quotes = stored_session(project, "quote me", ">" * 1200)  # was a RecursionError: 500
    bold = stored_session(project, "bold me", "**a " * 30_000)  # held the server for 32 s
    ui = UiServer(project)
    try:
        for sid, shown in ((quotes, b"&gt;&gt;&gt;&gt;"), (bold, b"**a **a **a")):
            started = time.monotonic()
            status, _, body = ui.request(f"/s/{sid}", token=True, timeout=30)
            assert status == 200 and shown in body, body[-300:]
            assert time.monotonic() - started < 5
    finally:
        ui.stop()


def test_a_long_render_leaves_the_server_answering(project: Path) -> None:
    """A page of 40 long messages takes a while to render; meanwhile a live page's
    revision polls are answered, because rendering runs beside the event loop."""
    text = "\n\n".join("> **a** *b* `c` [d](https://e/f)" for _ in range(1_400))  # 48 KB
    sid = stored_session(project, *(text for _ in range(40)))
    ui = UiServer(project)
    try:
        finished: list[float] = []

        def load() -> None:
            status, _, _ = ui.request(f"/s/{sid}", token=True, timeout=120)
            assert status == 200
            finished.append(time.monotonic())

        page = threading.Thread(target=load)
        page.start()
        answered_meanwhile = 0
        while not finished:
            assert ui.request(f"/s/{sid}/revision", token=True, timeout=120)[0] == 200
            if not finished:  # answered while the long page was still rendering
                answered_meanwhile += 1
            time.sleep(0.02)
        page.join()
        # Ordering, not timing: polls were answered before the render finished (a
        # render on the event loop would have held every one of them until the end).
        assert answered_meanwhile >= 3, answered_meanwhile
    finally:
        ui.stop()


def test_numbers_out_of_range_are_a_400_that_says_which(project: Path) -> None:
    sid = stored_session(project, "numbers", "an answer")
    ui = UiServer(project)
    try:
        for query in (f"before={10**30}", "before=-1", "before=abc", "after=-2",
                      "after=1e3", "before=%EF%BC%91"):  # a full-width digit one
            status, headers, body = ui.request(f"/s/{sid}/entries?{query}", token=True)
            assert status == 400, query
            answer = json.loads(body)
            name = query.split("=")[0]
            assert answer["ok"] is False and answer["message"].startswith(f"nonoka: {name}=")
        for query, name in (("n=abc", "n"), ("n=30", "n"), (f"n={10**30}", "n"),
                            ("from=0001-01-01", "from"), ("to=not-a-day", "to")):
            status, headers, body = ui.request(f"/?{query}", token=True)
            assert status == 400, query
            assert headers["content-type"].startswith("text/plain")
            assert body.decode().startswith(f"nonoka: {name}=") and b"; " in body
        # The values the pages make still work.
        for path in (f"/s/{sid}/entries?before=2", f"/s/{sid}/entries?after=-1",
                     "/?n=25&from=2024-01-31&to=2099-12-31"):
            assert ui.request(path, token=True)[0] == 200, path
        # A sessions cursor is opaque: one the database could not compare reads page one.
        cursor = base64.urlsafe_b64encode(f'[{10**30}, "x"]'.encode()).decode()
        status, _, body = ui.request(f"/?after={cursor}", token=True)
        assert status == 200 and b"numbers" in body
    finally:
        ui.stop()
