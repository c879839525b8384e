"""HTTP/2 `Run` (full duplex, h2c) against the REAL server process and runner, with the scripted
brain upstream: a text turn, a tool turn our client answers, cancel, compressed frames and
malformed streams."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator

from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from tests.e2e.test_shim import (
    Reader,
    cancel,
    chat_requests,
    exec_of,
    is_kind,
    is_text,
    read_ok,
    run_request,
    unique,
)
from tests.support import connect_client as cc
from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream


@contextlib.asynccontextmanager
async def h2_run(
    server: ServerProcess, *, compress: bool = False
) -> AsyncIterator[tuple[cc.H2Stream, Reader]]:
    client = await cc.H2Client.connect("127.0.0.1", server.port)
    try:
        extra = {"connect-content-encoding": "gzip"} if compress else {}
        stream = await client.open_run(extra=extra)

        async def send(message: agent_pb2.AgentClientMessage) -> None:
            await stream.send(message, compress=compress)

        reader = Reader(stream, send)
        try:
            yield stream, reader
        finally:
            await reader.close()
    finally:
        await client.close()


async def test_text_turn(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique("hello over h2")
    async with h2_run(server) as (stream, reader):
        await stream.send(run_request(prompt))
        end = await reader.wait_end()
    assert stream.headers[":status"] == "200"
    assert stream.headers["content-type"] == "application/connect+proto"
    assert end == {} and reader.turn_ended
    assert "".join(reader.texts) == f"You said: {prompt}"
    assert len(reader.texts) > 1  # streamed, not one blob
    (body,) = chat_requests(upstream, prompt)
    assert body["messages"][-1] == {"role": "user", "content": prompt}


async def test_tool_turn_answered_by_the_client(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    prompt = unique('[tool Read {"path": "/srv/app/config.toml"}]')
    async with h2_run(server) as (stream, reader):
        await stream.send(run_request(prompt))
        ask = await reader.wait_for(exec_of("read_args"))
        esm = ask.exec_server_message
        assert esm.read_args.path == "/srv/app/config.toml"
        await stream.send(read_ok(esm.id, esm.read_args.path, 'name = "h2-tool"\n'))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    assert 'The tool said:      1\tname = "h2-tool"' in "".join(reader.texts)
    bodies = chat_requests(upstream, prompt)
    assert len(bodies) == 2
    tool = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert tool and "h2-tool" in tool[0]["content"]


async def test_gzip_frames(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique('[tool Read {"path": "/srv/zipped.txt"}]')
    async with h2_run(server, compress=True) as (stream, reader):
        await stream.send(run_request(prompt), compress=True)
        ask = await reader.wait_for(exec_of("read_args"))
        await stream.send(
            read_ok(ask.exec_server_message.id, "/srv/zipped.txt", "gz ok\n"), compress=True
        )
        end = await reader.wait_end()
    assert end == {} and "gz ok" in "".join(reader.texts)


async def test_cancel_mid_stream(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique("[slow 6] cancel over h2")
    async with h2_run(server) as (stream, reader):
        await stream.send(run_request(prompt))
        await reader.wait_for(is_text)
        await stream.send(cancel())
        end = await reader.wait_end(5)
    assert end["error"]["code"] == "canceled", end
    assert not reader.turn_ended
    details = cc.decode_error_details(end["error"])
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_USER_ABORTED_REQUEST


async def test_cancel_mid_tool(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique('[tool Shell {"command": "sleep 30"}]')
    async with h2_run(server) as (stream, reader):
        await stream.send(run_request(prompt))
        ask = await reader.wait_for(exec_of("shell_stream_args"))
        await stream.send(cancel())
        abort = await reader.wait_for(is_kind("exec_server_control_message.abort"), 5)
        end = await reader.wait_end(5)
    assert abort.exec_server_control_message.abort.id == ask.exec_server_message.id
    assert end["error"]["code"] == "canceled" and not reader.turn_ended


async def test_malformed_streams_then_still_serving(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    cases = [
        (cc.envelope(b"\x0a\xff\xff\xff\x0f"), "invalid_argument"),  # undecodable protobuf
        (struct.pack(">BI", 0, 64 * 1024 * 1024), "resource_exhausted"),  # oversized frame
        (struct.pack(">BI", 0, 40) + b"\x0a\x05", "invalid_argument"),  # truncated, then EOF
    ]
    for data, code in cases:
        client = await cc.H2Client.connect("127.0.0.1", server.port)
        try:
            stream = await client.open_run()
            await stream.send(data)
            await stream.end()
            result = await stream.read_all(10)
        finally:
            await client.close()
        assert result.error is not None and result.error["code"] == code, (code, result.end)
        assert not result.trailing
    client = await cc.H2Client.connect("127.0.0.1", server.port)
    try:
        stream = await client.open(cc.RUN, {"content-type": "application/json"}, end_stream=True)
        await stream.read_all(5)
        assert stream.headers[":status"] == "415"
    finally:
        await client.close()
    prompt = unique("h2 still serving")
    async with h2_run(server) as (stream, reader):
        await stream.send(run_request(prompt))
        assert await reader.wait_end() == {}
    assert "".join(reader.texts) == f"You said: {prompt}"
