"""The Files API of ``nonoka serve`` and ``file_id`` inputs, on SQLite and PostgreSQL,
through the official ``openai`` client: the files' objects in OpenAI's shape, their
bytes reaching the model, each owner's files its own, and files kept across a restart."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types import FileDeleted, FileObject
from openai.types.responses import FunctionToolParam

from nonoka.serve.keys import add_key, open_keys
from nonoka.store.project import open_project_stores
from nonoka.testing import call, text
from nonoka.testing.server import ScriptedOpenAIServer
from tests.pg import schema_url, temp_schema
from tests.serve.conftest import MODEL
from tests.serve.harness import Served, request

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5E"
    "rkJggg==")
PDF = b"%PDF-1.1\n% a test file\n" + os.urandom(2048) + b"\n%%EOF\n"


class Place:
    """A project's database (``url`` ``None``: its SQLite file) and a server over it."""

    def __init__(self, project: Path, url: str | None) -> None:
        self.project = project
        self.url = url
        self.served = self.start()

    def start(self, keys: bool = False) -> Served:
        return Served(self.project, MODEL, database_url=self.url, keys=keys)

    def restart(self, keys: bool = False) -> Served:
        self.served.stop()
        self.served = self.start(keys)
        return self.served

    def client(self, key: str = "client-key") -> OpenAI:
        return self.served.client(key)

    def run(self, work: Any) -> Any:
        """``work(stores)`` on stores of its own over the same database."""
        async def go() -> Any:
            async with open_project_stores(self.project, self.url) as stores:
                return await work(stores)
        return asyncio.run(go())


@pytest.fixture(params=["sqlite", "postgresql"])
def place(request: pytest.FixtureRequest, project: Path, upstream_env: dict[str, str],
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Place]:
    if request.param == "sqlite":
        opened = Place(project, None)
        try:
            yield opened
        finally:
            opened.served.stop()
        return
    with temp_schema() as schema:
        url = schema_url(schema)
        monkeypatch.setenv("NONOKA_DATABASE_URL", url)
        opened = Place(project, url)
        try:
            yield opened
        finally:
            opened.served.stop()


def valid_file(data: Any) -> FileObject:
    """``data`` as openai-python's ``FileObject``, every field present and of its type."""
    found = FileObject.model_validate(data)
    assert set(data) >= {"id", "object", "bytes", "created_at", "filename", "purpose",
                         "status"}
    assert found.object == "file" and found.id.startswith("file-")
    return found


def raw(served: Served, method: str, path: str, body: Any = None,
        key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else None
    status, _, got = request(served.port, method, path, body, headers)
    return status, json.loads(got) if got else None


def test_upload_list_retrieve_download_delete(place: Place) -> None:
    client = place.client()
    made = [client.files.create(file=(f"notes{n}.txt", f"note {n}\n".encode(), "text/plain"),
                                purpose="user_data") for n in range(3)]
    pdf = client.files.create(file=("report.pdf", PDF, "application/pdf"),
                              purpose="assistants")
    for n, file in enumerate(made):
        assert (file.filename, file.bytes, file.purpose) == (f"notes{n}.txt", 7, "user_data")
    status, found = raw(place.served, "GET", f"/v1/files/{pdf.id}")
    assert status == 200
    assert valid_file(found).model_dump() == pdf.model_dump()
    assert (pdf.filename, pdf.bytes, pdf.purpose, pdf.status) == (
        "report.pdf", len(PDF), "assistants", "processed")
    assert client.files.content(pdf.id).read() == PDF

    status, listed = raw(place.served, "GET", "/v1/files")
    assert status == 200 and listed["object"] == "list" and listed["has_more"] is False
    ids = [valid_file(f).id for f in listed["data"]]
    assert set(ids) == {f.id for f in [*made, pdf]}
    assert ids == [f.id for f in client.files.list(order="desc")]
    assert [f.id for f in client.files.list(order="asc")] == list(reversed(ids))
    paged = client.files.list(limit=1, order="asc")
    assert len(paged.data) == 1 and paged.has_more
    assert [f.id for f in paged] == list(reversed(ids))  # the next pages by `after`
    assert {f.id for f in client.files.list(purpose="user_data")} == {f.id for f in made}

    deleted = client.files.delete(made[1].id)
    assert FileDeleted.model_validate(deleted.model_dump()).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(made[1].id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(made[1].id)
    with pytest.raises(openai.NotFoundError):
        client.files.delete(made[1].id)
    assert made[1].id not in {f.id for f in client.files.list()}

    served = place.restart()  # the files are the database's
    client = place.client()
    assert client.files.retrieve(pdf.id).model_dump() == pdf.model_dump()
    assert client.files.content(made[0].id).read() == b"note 0\n"
    assert len(client.files.list().data) == 3
    status, body = raw(served, "GET", "/v1/files?order=sideways")
    assert status == 400 and body["error"]["param"] == "order"


def test_bad_uploads_are_refused_clearly(place: Place) -> None:
    client = place.client()
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=("a.txt", b"a"), purpose="homework")  # type: ignore[arg-type]
    assert refused.value.body["param"] == "purpose"  # type: ignore[index]
    assert "'homework' is not one of" in refused.value.message
    place.served.api.files.max_bytes = 100
    with pytest.raises(openai.APIStatusError) as too_large:
        client.files.create(file=("big.bin", b"x" * 101), purpose="user_data")
    assert too_large.value.status_code == 413
    assert too_large.value.body["code"] == "file_too_large"  # type: ignore[index]
    assert client.files.create(file=("fits.bin", b"x" * 100), purpose="user_data").bytes == 100
    status, body = raw(place.served, "POST", "/v1/files", {"purpose": "user_data"})
    assert status == 415 and "multipart/form-data" in body["error"]["message"]
    with pytest.raises(openai.PermissionDeniedError):  # a form a web page posted
        client.files.create(file=("a.txt", b"a"), purpose="user_data",
                            extra_headers={"Origin": "https://example.com"})
    same = f"http://127.0.0.1:{place.served.port}"
    assert client.files.create(file=("a.txt", b"a"), purpose="user_data",
                               extra_headers={"Origin": same}).bytes == 1
    with pytest.raises(openai.NotFoundError) as missing:
        client.files.retrieve("file-0000")
    assert missing.value.body["param"] == "id"  # type: ignore[index]


def test_a_file_by_id_reaches_the_model_and_stays_with_the_session(
        place: Place, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    client = place.client()
    pdf = client.files.create(file=("report.pdf", PDF, "application/pdf"),
                              purpose="user_data")
    png = client.files.create(file=("dot.png", PNG, "image/png"), purpose="vision")
    scripted += [text("a report and a dot"), text("still a report")]
    first = client.responses.create(model="m", input=[{
        "type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "what are these?"},
            {"type": "input_file", "file_id": pdf.id},
            {"type": "input_image", "file_id": png.id, "detail": "auto"}]}])
    encoded_pdf = base64.b64encode(PDF).decode()
    encoded_png = base64.b64encode(PNG).decode()
    sent = [{"type": "text", "text": "what are these?"},
            {"type": "file", "file": {"filename": "report.pdf",
                                      "file_data": f"data:application/pdf;base64,{encoded_pdf}"}},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded_png}"}}]
    assert server.requests[0]["messages"][0]["content"] == sent
    items = client.responses.input_items.list(first.id, order="asc")
    content = items.data[0].model_dump()["content"]
    assert {k: v for k, v in content[1].items() if v is not None} == {
        "type": "input_file", "file_id": pdf.id, "filename": "report.pdf"}  # no bytes back
    assert (content[2]["type"], content[2]["file_id"]) == ("input_image", png.id)

    client.files.delete(pdf.id)
    client.files.delete(png.id)
    with pytest.raises(openai.NotFoundError):  # a deleted file is one that does not exist
        client.responses.create(model="m", input=[{"type": "message", "role": "user",
                                                   "content": [{"type": "input_file",
                                                                "file_id": pdf.id}]}])
    place.restart()  # the session keeps the bytes it was sent, whatever became of the file
    client = place.client()
    client.responses.create(model="m", input="and now?", previous_response_id=first.id)
    assert server.requests[1]["messages"][0]["content"] == sent


def test_a_file_id_spelled_with_escapes_is_found(place: Place, scripted: list[Any],
                                                 server: ScriptedOpenAIServer) -> None:
    """JSON may spell a key with escapes; the server's quick look for ``file_id`` in the
    bytes must not miss it (a missed id would be answered 404)."""
    pdf = place.client().files.create(file=("report.pdf", PDF, "application/pdf"),
                                      purpose="user_data")
    scripted.append(text("a report"))
    body = json.dumps({"model": "m", "input": [{"type": "message", "role": "user", "content": [
        {"type": "input_file", "file_id": pdf.id}]}]}).replace('"file_id"', '"file\\u005fid"')
    assert "file_id" not in body
    connection = http.client.HTTPConnection("127.0.0.1", place.served.port, timeout=60)
    try:
        connection.request("POST", "/v1/responses", body=body,
                           headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        assert answer.status == 200, answer.read()
    finally:
        connection.close()
    sent = server.requests[0]["messages"][0]["content"]
    assert sent == [{"type": "file", "file": {
        "filename": "report.pdf",
        "file_data": f"data:application/pdf;base64,{base64.b64encode(PDF).decode()}"}}]


def test_a_tool_output_s_image_by_id_reaches_the_model(
        place: Place, scripted: list[Any], server: ScriptedOpenAIServer) -> None:
    """A function call's output may be content parts: an image there by ``file_id`` is
    the file's bytes, as in a message."""
    client = place.client()
    png = client.files.create(file=("shot.png", PNG, "image/png"), purpose="vision")
    scripted += [call("screenshot", {}, id="call_shot"), text("a single dot")]
    tool: FunctionToolParam = {"type": "function", "name": "screenshot",
                               "parameters": {"type": "object"}, "strict": False}
    asked = client.responses.create(model="m", input="take a screenshot", tools=[tool])
    [called] = [item for item in asked.output if item.type == "function_call"]
    client.responses.create(model="m", previous_response_id=asked.id, tools=[tool], input=[{
        "type": "function_call_output", "call_id": called.call_id,
        "output": [{"type": "input_image", "file_id": png.id, "detail": "auto"}]}])
    encoded = base64.b64encode(PNG).decode()
    sent = json.dumps(server.requests[1]["messages"][-2:])
    assert f"data:image/png;base64,{encoded}" in sent, sent


def test_chat_and_conversations_take_file_ids(place: Place, scripted: list[Any],
                                              server: ScriptedOpenAIServer) -> None:
    client = place.client()
    pdf = client.files.create(file=("report.pdf", PDF, "application/pdf"),
                              purpose="user_data")
    scripted.append(text("read it"))
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": [
        {"type": "text", "text": "read"}, {"type": "file", "file": {"file_id": pdf.id}}]}])
    assert server.requests[0]["messages"][0]["content"][1]["file"]["file_data"] == \
        "data:application/pdf;base64," + base64.b64encode(PDF).decode()
    made = client.conversations.create(items=[{"type": "message", "role": "user", "content": [
        {"type": "input_file", "file_id": pdf.id}]}])
    listed = client.conversations.items.list(made.id)
    assert listed.data[0].model_dump()["content"][0]["file_id"] == pdf.id
    with pytest.raises(openai.NotFoundError) as missing:
        client.conversations.items.create(made.id, items=[{
            "type": "message", "role": "user",
            "content": [{"type": "input_file", "file_id": "file-nothing"}]}])
    assert missing.value.body["param"].endswith("file_id")  # type: ignore[index]


def test_a_deleted_session_leaves_a_live_files_bytes(place: Place, scripted: list[Any],
                                                     server: ScriptedOpenAIServer) -> None:
    """The media collection after a session's delete keeps what a live file refers to,
    and a file's delete frees bytes nothing else refers to."""
    client = place.client()
    pdf = client.files.create(file=("report.pdf", PDF, "application/pdf"),
                              purpose="user_data")
    alone = client.files.create(file=("alone.bin", b"only a file"), purpose="user_data")
    scripted.append(text("ok"))
    client.responses.create(model="m", input=[{"type": "message", "role": "user", "content": [
        {"type": "input_file", "file_id": pdf.id}]}])

    async def delete_all(stores: Any) -> int:
        sessions = await stores.index.list_sessions(limit=100)
        for record in sessions:
            assert await stores.checkpoints.delete_session(record.session_id)
        return len(sessions)

    assert place.run(delete_all) == 1
    assert client.files.content(pdf.id).read() == PDF

    async def stored(stores: Any) -> list[bool]:
        from nonoka.store.media import digest_of

        return [await stores.checkpoints.load_media(digest_of(data)) is not None
                for data in (PDF, b"only a file")]

    assert place.run(stored) == [True, True]
    client.files.delete(alone.id)
    client.files.delete(pdf.id)
    assert place.run(stored) == [False, False]


def make_key(place: Place, name: str) -> str:
    async def make() -> str:
        keys = open_keys(place.project, place.url)
        try:
            return (await add_key(keys, name))[1]
        finally:
            await keys.close()
    return asyncio.run(make())


def test_each_owner_sees_only_its_own_files(place: Place, scripted: list[Any]) -> None:
    alice_key, bob_key = make_key(place, "alice"), make_key(place, "bob")
    served = place.restart(keys=True)
    alice, bob = place.client(alice_key), place.client(bob_key)
    mine = alice.files.create(file=("mine.txt", b"alice's"), purpose="user_data")
    assert [f.id for f in alice.files.list()] == [mine.id]
    assert bob.files.list().data == []
    for attempt in (lambda: bob.files.retrieve(mine.id), lambda: bob.files.content(mine.id),
                    lambda: bob.files.delete(mine.id)):
        with pytest.raises(openai.NotFoundError) as refused:
            attempt()
        assert refused.value.body["message"] == f"No such File object: {mine.id}"  # type: ignore[index]
    status, body = raw(served, "POST", "/v1/responses", {"model": "m", "input": [
        {"type": "message", "role": "user",
         "content": [{"type": "input_file", "file_id": mine.id}]}]}, bob_key)
    assert status == 404, body
    assert body["error"]["param"] == "input[0].content[0].file_id"
    assert body["error"]["message"] == f"No such File object: {mine.id}"
    status, body = raw(served, "GET", f"/v1/files?after={mine.id}", key=bob_key)
    assert status == 400 and body["error"]["param"] == "after"
    assert alice.files.content(mine.id).read() == b"alice's"


def test_a_request_names_at_most_a_hundred_files(place: Place) -> None:
    parts = [{"type": "input_file", "file_id": f"file-{n}"} for n in range(101)]
    status, body = raw(place.served, "POST", "/v1/responses", {"model": "m", "input": [
        {"type": "message", "role": "user", "content": parts}]})
    assert status == 400 and "at most 100" in body["error"]["message"], body
    status, body = raw(place.served, "POST", "/v1/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-none"}}]}]})
    assert status == 404 and body["error"]["param"] == "messages[0].content[0].file.file_id"


def post_form(served: Served, body: bytes, content_type: str) -> tuple[int, Any]:
    """``body`` posted to ``/v1/files`` as it is, under ``content_type``."""
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    try:
        connection.request("POST", "/v1/files", body=body,
                           headers={"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def form(*parts: tuple[str, str | None, bytes], boundary: str = "b0und") -> bytes:
    """A ``multipart/form-data`` body of ``(name, filename, data)`` parts."""
    out = b""
    for name, filename, data in parts:
        named = f'; filename="{filename}"' if filename is not None else ""
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"{named}\r\n'
                "\r\n").encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def test_hostile_uploads_are_refused_clearly(project: Path, upstream_env: dict[str, str]
                                             ) -> None:
    served = Served(project, MODEL)
    try:
        kind = "multipart/form-data; boundary=b0und"
        whole = form(("purpose", None, b"user_data"), ("file", "a.txt", b"hello"))
        assert post_form(served, whole, kind)[1]["bytes"] == 5  # the well-formed one
        cut = whole[:whole.index(b"hello") + 3]  # the body ends inside the file
        status, body = post_form(served, cut, kind)
        assert status == 400 and body["error"]["param"] == "file"
        assert "closing boundary" in body["error"]["message"]
        status, body = post_form(served, whole, "multipart/form-data")  # no boundary
        assert status == 400 and "boundary" in body["error"]["message"].lower()
        two = form(("purpose", None, b"user_data"), ("file", "a.txt", b"a"),
                   ("file", "b.txt", b"b"))
        status, body = post_form(served, two, kind)
        assert status == 400 and "Too many files" in body["error"]["message"]
        huge = form(("purpose", None, b"user_data"), ("note", None, b"x" * 70_000),
                    ("file", "a.txt", b"a"))
        status, body = post_form(served, huge, kind)
        assert status == 400 and "maximum size" in body["error"]["message"]
        many = form(*[(f"f{n}", None, b"v") for n in range(20)],
                    ("purpose", None, b"user_data"), ("file", "a.txt", b"a"))
        status, body = post_form(served, many, kind)
        assert status == 400 and "Too many fields" in body["error"]["message"]
        status, body = post_form(served, b"--b0und\r\n\x00garbage\r\n--b0und--\r\n", kind)
        assert status == 400 and body["error"]["type"] == "invalid_request_error"
        served.api.files.max_bytes = 1000  # a body too large, whatever its parts say
        big = form(("purpose", None, b"user_data"), ("file", "big.bin", b"x" * 70_000))
        status, body = post_form(served, big, kind)
        assert status == 413 and body["error"]["code"] == "file_too_large"
    finally:
        served.stop()
