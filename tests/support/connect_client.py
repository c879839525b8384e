"""Our own Connect client for tests, over real HTTP on loopback, plus tiny run handlers.

Independent of the server's codec on purpose (its own envelope parser), so a symmetric bug in
`cursor_byok.transport.connect` cannot hide itself.

- HTTP/1.1 shim: `append(...)`, `runsse(...)` (httpx, http1).
- Unary: `unary(...)` (httpx; proto or JSON codec).
- HTTP/2 `Run`: `H2Client` (the `h2` library over an asyncio socket; h2c prior knowledge, or TLS
  with ALPN h2). httpx cannot do full duplex: it sends the whole request body before it reads
  the response, and a `Run` client never ends its body during a turn.
- Handlers (`echo_handler`, `ordered_echo_handler`, `slow_handler`, `failing_handler`) that
  tests inject into the server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import ssl
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx

from cursor_byok.transport.connect.channel import EndError, RunChannel
from cursor_byok.transport.connect.sessions import RunStartInfo
from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2

RUN = "/agent.v1.AgentService/Run"
RUNSSE = "/agent.v1.AgentService/RunSSE"
APPEND = "/aiserver.v1.BidiService/BidiAppend"


# ---------------------------------------------------------------------------------------------
# Framing (independent implementation)
# ---------------------------------------------------------------------------------------------


def envelope(payload: bytes, flags: int = 0, *, compress: bool = False) -> bytes:
    if compress:
        payload = gzip.compress(payload)
        flags |= 0x01
    return struct.pack(">BI", flags, len(payload)) + payload


@dataclass
class Frame:
    flags: int
    payload: bytes


def split_frames(data: bytes) -> tuple[list[Frame], bytes]:
    """Complete frames and the leftover bytes."""
    frames: list[Frame] = []
    i = 0
    while len(data) - i >= 5:
        flags, length = struct.unpack_from(">BI", data, i)
        if len(data) - i - 5 < length:
            break
        frames.append(Frame(flags, data[i + 5 : i + 5 + length]))
        i += 5 + length
    return frames, data[i:]


@dataclass
class StreamResult:
    """What a server stream carried: messages, and the end-stream JSON (None if it never came)."""

    messages: list[agent_pb2.AgentServerMessage] = field(default_factory=list)
    end: dict[str, Any] | None = None
    trailing: bytes = b""  # bytes after the end-stream frame (must be empty)
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    def add(self, frame: Frame) -> None:
        if frame.flags & 0x02:
            self.end = json.loads(frame.payload or b"{}")
        else:
            self.messages.append(agent_pb2.AgentServerMessage.FromString(frame.payload))

    @property
    def texts(self) -> list[str]:
        return [
            m.interaction_update.text_delta.text
            for m in self.messages
            if m.interaction_update.WhichOneof("message") == "text_delta"
        ]

    @property
    def heartbeats(self) -> int:
        return sum(
            1 for m in self.messages if m.interaction_update.WhichOneof("message") == "heartbeat"
        )

    @property
    def non_heartbeats(self) -> list[agent_pb2.AgentServerMessage]:
        return [
            m for m in self.messages if m.interaction_update.WhichOneof("message") != "heartbeat"
        ]

    @property
    def turn_ended(self) -> bool:
        return any(
            m.interaction_update.WhichOneof("message") == "turn_ended" for m in self.messages
        )

    @property
    def error(self) -> dict[str, Any] | None:
        return None if self.end is None else self.end.get("error")


def decode_error_details(error: dict[str, Any]) -> aiserver_pb2.ErrorDetails:
    detail = error["details"][0]
    assert detail["type"] == "aiserver.v1.ErrorDetails"
    value = detail["value"]
    assert "=" not in value, "details value must be unpadded"
    return aiserver_pb2.ErrorDetails.FromString(base64.b64decode(value + "=" * (-len(value) % 4)))


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------


def run_request(text: str = "hello", *, run_id: str = "") -> agent_pb2.AgentClientMessage:
    req = agent_pb2.AgentRunRequest(run_id=run_id)
    req.action.user_message_action.user_message.text = text
    return agent_pb2.AgentClientMessage(run_request=req)


def heartbeat() -> agent_pb2.AgentClientMessage:
    return agent_pb2.AgentClientMessage(client_heartbeat=agent_pb2.ClientHeartbeat())


def cancel(reason: str = "done") -> agent_pb2.AgentClientMessage:
    msg = agent_pb2.AgentClientMessage()
    msg.conversation_action.cancel_action.reason = reason
    return msg


def text_delta(text: str) -> agent_pb2.AgentServerMessage:
    return agent_pb2.AgentServerMessage(
        interaction_update=agent_pb2.InteractionUpdate(
            text_delta=agent_pb2.TextDeltaUpdate(text=text)
        )
    )


def turn_ended() -> agent_pb2.AgentServerMessage:
    return agent_pb2.AgentServerMessage(
        interaction_update=agent_pb2.InteractionUpdate(
            turn_ended=agent_pb2.TurnEndedUpdate(input_tokens=1, output_tokens=2)
        )
    )


# ---------------------------------------------------------------------------------------------
# Handlers injected into the server by tests
# ---------------------------------------------------------------------------------------------


async def echo_handler(channel: RunChannel, info: RunStartInfo) -> None:
    """Reads the run_request; sends two text deltas and turn_ended; finishes."""
    first = await channel.receive()
    if first is None or first.message.WhichOneof("message") != "run_request":
        channel.finish(EndError("invalid_argument", "expected a run_request first"))
        return
    text = first.message.run_request.action.user_message_action.user_message.text
    channel.send(text_delta(f"echo[{info.transport}]: ").SerializeToString())
    channel.send(text_delta(text).SerializeToString())
    channel.send(turn_ended().SerializeToString())
    channel.finish()


async def ordered_echo_handler(channel: RunChannel, info: RunStartInfo) -> None:
    """Echoes every input as a text delta `"<input_id> <kind>"`; a conversation_action ends it."""
    while True:
        incoming = await channel.receive()
        if incoming is None:
            channel.finish(EndError("canceled", "input ended"))
            return
        kind = incoming.message.WhichOneof("message")
        channel.send(text_delta(f"{incoming.input_id} {kind}").SerializeToString())
        if kind == "conversation_action":
            channel.send(turn_ended().SerializeToString())
            channel.finish()
            return


SLOW_SECONDS = 1.2


async def slow_handler(channel: RunChannel, info: RunStartInfo) -> None:
    """Like echo_handler, but thinks for SLOW_SECONDS before answering."""
    first = await channel.receive()
    assert first is not None
    await asyncio.sleep(SLOW_SECONDS)
    channel.send(text_delta("done thinking").SerializeToString())
    channel.send(turn_ended().SerializeToString())
    channel.finish()


def provider_error_details(detail: str) -> bytes:
    return aiserver_pb2.ErrorDetails(
        error=aiserver_pb2.ErrorDetails.ERROR_PROVIDER_ERROR,
        details=aiserver_pb2.CustomErrorDetails(
            title="Server Error", detail=detail, is_retryable=True, show_request_id=True
        ),
        is_expected=False,
    ).SerializeToString()


async def failing_handler(channel: RunChannel, info: RunStartInfo) -> None:
    """Reads the run_request, sends one delta, then fails like a provider outage."""
    await channel.receive()
    channel.send(text_delta("partial").SerializeToString())
    channel.finish(EndError("unavailable", "provider down", provider_error_details("HTTP 503")))


async def crashing_handler(channel: RunChannel, info: RunStartInfo) -> None:
    await channel.receive()
    raise RuntimeError("boom")


# ---------------------------------------------------------------------------------------------
# HTTP/1.1 shim and unary calls (httpx)
# ---------------------------------------------------------------------------------------------


def auth_headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


async def append(
    client: httpx.AsyncClient,
    request_id: str,
    seqno: int,
    message: agent_pb2.AgentClientMessage | bytes,
    *,
    binary: bool = False,
    gzip_body: bool = False,
    enveloped: bool = False,
    hex_data: str | None = None,
    token: str | None = None,
    content_type: str = "application/proto",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST one BidiAppend. `message` may be raw bytes (to send garbage); `headers` are
    added to the request's own."""
    payload = message if isinstance(message, bytes) else message.SerializeToString()
    req = aiserver_pb2.BidiAppendRequest(append_seqno=seqno)
    req.request_id.request_id = request_id
    if binary:
        req.data_binary = payload
    else:
        req.data = hex_data if hex_data is not None else payload.hex()
    body = req.SerializeToString()
    extra = headers or {}
    headers = {"content-type": content_type, "x-request-id": request_id, **auth_headers(token)}
    headers.update(extra)
    if enveloped:
        body = envelope(body)
    if gzip_body:
        body = gzip.compress(body)
        headers["content-encoding"] = "gzip"
    return await client.post(APPEND, content=body, headers=headers)


@contextlib.asynccontextmanager
async def runsse(
    client: httpx.AsyncClient,
    request_id: str,
    *,
    token: str | None = None,
    content_type: str = "application/connect+proto",
) -> AsyncIterator[SseStream]:
    """Open RunSSE; yields a reader. The body is one envelope holding BidiRequestId."""
    body = envelope(aiserver_pb2.BidiRequestId(request_id=request_id).SerializeToString())
    headers = {
        "content-type": content_type,
        "connect-protocol-version": "1",
        "x-request-id": request_id,
        **auth_headers(token),
    }
    request = client.build_request("POST", RUNSSE, content=body, headers=headers)
    response = await client.send(request, stream=True)
    try:
        yield SseStream(response)
    finally:
        await response.aclose()


class SseStream:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.result = StreamResult(status=response.status_code, headers=dict(response.headers))
        self._iter = response.aiter_raw()
        self._buf = b""
        self._frames: list[Frame] = []

    async def next_frame(self, timeout: float = 5.0) -> Frame | None:
        """The next frame, or None at the end of the body."""
        while not self._frames:
            try:
                chunk = await asyncio.wait_for(self._iter.__anext__(), timeout)
            except StopAsyncIteration:
                self.result.trailing = self._buf
                return None
            frames, self._buf = split_frames(self._buf + chunk)
            self._frames.extend(frames)
        frame = self._frames.pop(0)
        if self.result.end is not None:
            self.result.trailing += frame.payload or b"?"
        self.result.add(frame)
        return frame

    async def read_until(
        self, count: int, timeout: float = 5.0
    ) -> list[agent_pb2.AgentServerMessage]:
        """Read until `count` non-heartbeat messages arrived (or the stream ended)."""
        while len(self.result.non_heartbeats) < count and self.result.end is None:
            if await self.next_frame(timeout) is None:
                break
        return self.result.non_heartbeats

    async def read_all(self, timeout: float = 5.0) -> StreamResult:
        while await self.next_frame(timeout) is not None:
            pass
        return self.result


class ConnectCallError(Exception):
    def __init__(self, status: int, body: dict[str, Any]):
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.code = body.get("code")
        self.body = body


async def unary(
    client: httpx.AsyncClient,
    path: str,
    request: Any,
    response_type: type[Any],
    *,
    codec: str = "proto",
    token: str | None = None,
) -> Any:
    """One Connect unary call; raises ConnectCallError on a non-200 reply."""
    from google.protobuf import json_format

    if codec == "json":
        body = json_format.MessageToJson(request).encode()
        ctype = "application/json"
    else:
        body = request.SerializeToString()
        ctype = "application/proto"
    headers = {"content-type": ctype, "connect-protocol-version": "1", **auth_headers(token)}
    r = await client.post(path, content=body, headers=headers)
    if r.status_code != 200:
        raise ConnectCallError(r.status_code, r.json())
    assert r.headers["content-type"] == ctype
    if codec == "json":
        return json_format.Parse(r.text, response_type())
    return response_type.FromString(r.content)


# ---------------------------------------------------------------------------------------------
# HTTP/2 client (h2 over asyncio), full duplex
# ---------------------------------------------------------------------------------------------


class H2Stream:
    def __init__(self, conn: H2Client, stream_id: int) -> None:
        self.conn = conn
        self.stream_id = stream_id
        self.headers: dict[str, str] = {}
        self.headers_event = asyncio.Event()
        self.data: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.result = StreamResult()
        self.reset_code: int | None = None
        self._buf = b""
        self._frames: list[Frame] = []
        self.ended = False

    async def send(
        self, message: agent_pb2.AgentClientMessage | bytes, *, compress: bool = False
    ) -> None:
        if isinstance(message, bytes):
            data = message
        else:
            data = envelope(message.SerializeToString(), compress=compress)
        await self.conn.send_data(self.stream_id, data)

    async def end(self) -> None:
        await self.conn.end_stream(self.stream_id)

    async def next_frame(self, timeout: float = 5.0) -> Frame | None:
        while not self._frames:
            chunk = await asyncio.wait_for(self.data.get(), timeout)
            if chunk is None:
                self.ended = True
                self.result.trailing = self._buf
                return None
            frames, self._buf = split_frames(self._buf + chunk)
            self._frames.extend(frames)
        frame = self._frames.pop(0)
        self.result.add(frame)
        return frame

    async def read_until(
        self, count: int, timeout: float = 5.0
    ) -> list[agent_pb2.AgentServerMessage]:
        while len(self.result.non_heartbeats) < count and self.result.end is None:
            if await self.next_frame(timeout) is None:
                break
        return self.result.non_heartbeats

    async def read_all(self, timeout: float = 5.0) -> StreamResult:
        while await self.next_frame(timeout) is not None:
            pass
        return self.result


class H2Client:
    """A minimal HTTP/2 client: h2c with prior knowledge, or TLS with ALPN h2."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str):
        self.reader = reader
        self.writer = writer
        self.authority = authority
        self.scheme = "https" if writer.get_extra_info("ssl_object") else "http"
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.streams: dict[int, H2Stream] = {}
        self._window = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.alpn: str | None = None
        self.closed = False

    @classmethod
    async def connect(
        cls, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None
    ) -> H2Client:
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["h2"])
        reader, writer = await asyncio.open_connection(
            host, port, ssl=ssl_context, server_hostname=host if ssl_context else None
        )
        self = cls(reader, writer, f"{host}:{port}")
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.alpn = ssl_object.selected_alpn_protocol()
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(16 * 1024 * 1024)
        await self._flush()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())
        return self

    async def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                for event in self.h2.receive_data(data):
                    self._on_event(event)
                await self._flush()
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed = True
            for stream in self.streams.values():
                stream.headers_event.set()
                stream.data.put_nowait(None)
            self._window.set()

    def _on_event(self, event: Any) -> None:
        sid = getattr(event, "stream_id", None)
        stream = self.streams.get(sid) if sid else None
        if isinstance(event, h2.events.ResponseReceived) and stream:
            stream.headers = {k.decode(): v.decode() for k, v in event.headers}
            stream.result.status = int(stream.headers.get(":status", "0"))
            stream.result.headers = stream.headers
            stream.headers_event.set()
        elif isinstance(event, h2.events.DataReceived) and stream:
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            stream.data.put_nowait(event.data)
        elif isinstance(event, h2.events.StreamEnded) and stream:
            stream.data.put_nowait(None)
        elif isinstance(event, h2.events.StreamReset) and stream:
            stream.reset_code = event.error_code
            stream.headers_event.set()
            stream.data.put_nowait(None)
        elif isinstance(event, h2.events.WindowUpdated):
            self._window.set()

    async def open(
        self, path: str, headers: dict[str, str] | None = None, *, end_stream: bool = False
    ) -> H2Stream:
        async with self._lock:
            sid = self.h2.get_next_available_stream_id()
            stream = H2Stream(self, sid)
            self.streams[sid] = stream
            hdrs = [
                (":method", "POST"),
                (":scheme", self.scheme),
                (":authority", self.authority),
                (":path", path),
            ]
            hdrs += list((headers or {}).items())
            self.h2.send_headers(sid, hdrs, end_stream=end_stream)
            await self._flush()
        return stream

    async def open_run(
        self,
        *,
        token: str | None = None,
        request_id: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> H2Stream:
        headers = {
            "content-type": "application/connect+proto",
            "connect-protocol-version": "1",
            "te": "trailers",
            **auth_headers(token),
        }
        if request_id:
            headers["x-request-id"] = request_id
        headers.update(extra or {})
        return await self.open(RUN, headers)

    async def send_data(self, stream_id: int, data: bytes) -> None:
        while data:
            async with self._lock:
                window = min(
                    self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size
                )
                if window > 0:
                    chunk, data = data[:window], data[window:]
                    self.h2.send_data(stream_id, chunk)
                    await self._flush()
                    continue
                self._window.clear()
            if self.closed:
                raise ConnectionError("connection closed")
            await asyncio.wait_for(self._window.wait(), 10)

    async def end_stream(self, stream_id: int) -> None:
        async with self._lock:
            self.h2.end_stream(stream_id)
            await self._flush()

    async def reset(self, stream_id: int) -> None:
        async with self._lock:
            self.h2.reset_stream(stream_id)
            await self._flush()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            async with self._lock:
                self.h2.close_connection()
                await self._flush()
        if self._task:
            self._task.cancel()
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
