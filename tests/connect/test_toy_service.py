"""The Connect layer serves a service it knows nothing about: a toy echo service whose
messages are plain UTF-8 text, no protobuf and no Cursor, through the real `ConnectApp`
(in-process ASGI): a unary RPC, the HTTP/1.1 shim's appends and its stream, a bad message."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

import httpx

from cursor_byok.transport.connect.app import ConnectApp
from cursor_byok.transport.connect.channel import EndError, RunChannel
from cursor_byok.transport.connect.service import Append, Codec, UnaryHandler


class EchoService:
    run_path = "/toy.Echo/Run"
    runsse_path = "/toy.Echo/RunSSE"
    append_path = "/toy.Echo/Append"
    heartbeat = b"..."
    error_details_type = "toy.Error"

    def parse_client(self, payload: bytes) -> object:
        try:
            return payload.decode()
        except UnicodeDecodeError:
            raise ValueError("not UTF-8 text") from None

    def stream_request_id(self, first: object) -> str:
        return ""

    def parse_stream_open(self, raw: bytes) -> str:
        return raw.decode()

    def parse_append(self, raw: bytes, codec: Codec) -> Append:
        if codec != "json":
            raise ValueError("appends are JSON")
        body = json.loads(raw)
        payload = body["text"].encode()
        return Append(body["id"], body["seqno"], payload, self.parse_client(payload))

    def append_response(self, codec: Codec) -> bytes:
        return b"{}"

    def unary(self, path: str) -> UnaryHandler | None:
        if path != "/toy.Echo/Upper":
            return None

        def upper(body: bytes, codec: Codec, headers: Mapping[str, str]) -> bytes:
            return body.upper()

        return upper


async def shout(channel: RunChannel, info: object) -> None:
    """Echo each message upper-cased until "bye"; a message "fail" ends with an error."""
    while (incoming := await channel.receive()) is not None:
        text = str(incoming.message)
        if text == "fail":
            channel.finish(EndError("failed_precondition", "asked to fail"))
            return
        channel.send(f"{incoming.input_id}={text.upper()}".encode())
        if text == "bye":
            break
    channel.finish()


def frames(body: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(body):
        flags, size = struct.unpack(">BI", body[pos : pos + 5])
        out.append((flags, body[pos + 5 : pos + 5 + size]))
        pos += 5 + size
    return out


def envelope(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


async def client() -> httpx.AsyncClient:
    app = ConnectApp(EchoService(), shout)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://toy")


async def test_a_unary_rpc_of_the_toy_service() -> None:
    async with await client() as c:
        r = await c.post(
            "/toy.Echo/Upper", content=b"hello", headers={"content-type": "application/json"}
        )
        assert r.status_code == 200 and r.content == b"HELLO"
        missing = await c.post(
            "/toy.Echo/Nope", content=b"x", headers={"content-type": "application/json"}
        )
        assert missing.status_code == 501 and missing.json()["code"] == "unimplemented"


async def test_the_shim_orders_appends_and_streams_the_answers() -> None:
    async with await client() as c:
        json_type = {"content-type": "application/json"}
        for seqno, text in ((1, "bye"), (0, "hi"), (0, "hi")):  # out of order, a duplicate
            body = json.dumps({"id": "r1", "seqno": seqno, "text": text})
            r = await c.post("/toy.Echo/Append", content=body, headers=json_type)
            assert r.status_code == 200, r.text
        stream = await c.post(
            "/toy.Echo/RunSSE",
            content=envelope(b"r1"),
            headers={"content-type": "application/connect+proto"},
        )
        assert stream.status_code == 200
        got = frames(stream.content)
        messages = [payload for flags, payload in got if flags == 0 and payload != b"..."]
        assert messages == [b"r1:0=HI", b"r1:1=BYE"]
        assert got[-1] == (2, b"{}")


async def test_an_unreadable_message_and_an_error_end_reach_the_client_as_connect_errors() -> None:
    async with await client() as c:
        json_type = {"content-type": "application/json"}
        bad = await c.post(
            "/toy.Echo/Append",
            content=b'{"id": "r2", "seqno": 0, "text": "ok"',  # truncated JSON
            headers=json_type,
        )
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
        body = json.dumps({"id": "r3", "seqno": 0, "text": "fail"})
        assert (await c.post("/toy.Echo/Append", content=body, headers=json_type)).is_success
        stream = await c.post(
            "/toy.Echo/RunSSE",
            content=envelope(b"r3"),
            headers={"content-type": "application/connect+proto"},
        )
        flags, end = frames(stream.content)[-1]
        assert flags == 2
        assert json.loads(end)["error"] == {
            "code": "failed_precondition",
            "message": "asked to fail",
        }
