"""The HTTP side: a raw ASGI app speaking Connect, served by granian on one port.

Routes (see docs/transport.md):
  POST /agent.v1.AgentService/Run            bidi stream (HTTP/2, full duplex)
  POST /agent.v1.AgentService/RunSSE         server stream of the HTTP/1.1 shim
  POST /aiserver.v1.BidiService/BidiAppend   unary, one client message of the shim
  POST <unary RPCs in rpc.UNARY_METHODS>     answered locally
  GET  /healthz                              200 once ready (no auth)

Authentication (`server.auth_token`) is checked from the headers before any body is read.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import contextlib
import errno
import hmac
import importlib
import ipaddress
import logging
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, MutableMapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.message import (  # type: ignore[import-untyped,unused-ignore]
    DecodeError,
    Message,
)

from ..config import Config, ConfigError, load_config, port_number
from .connect import (
    FLAG_END_STREAM,
    ConnectError,
    EnvelopeReader,
    decode_unary_body,
    decompress,
    encode_envelope,
    end_stream_frame,
    grpc_web_trailers_frame,
)
from .cursor.proto import agent_pb2, aiserver_pb2
from .rpc import UNARY_METHODS, UnaryContext
from .rsgi import WRITE_NOWAIT, RsgiBridge
from .sessions import RunHandler, Session, SessionRegistry, TransportLimits

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
AsgiMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[AsgiMessage]]
Send = Callable[[AsgiMessage], Awaitable[None]]
StreamProtocol = Literal["connect", "grpc-web"]
UnaryCodec = Literal["proto", "json", "connect", "grpc-web"]

RUN_PATH = "/agent.v1.AgentService/Run"
RUNSSE_PATH = "/agent.v1.AgentService/RunSSE"
BIDI_APPEND_PATH = "/aiserver.v1.BidiService/BidiAppend"
HEALTH_PATH = "/healthz"
MAX_RUNSSE_BODY = 64 * 1024

CONNECT_PROTO = "application/connect+proto"
GRPC_WEB_PROTO = "application/grpc-web+proto"
HEARTBEAT_FRAME = encode_envelope(
    agent_pb2.AgentServerMessage(
        interaction_update=agent_pb2.InteractionUpdate(heartbeat=agent_pb2.HeartbeatUpdate())
    ).SerializeToString()
)

_UNARY_CODECS: dict[str, UnaryCodec] = {
    "application/proto": "proto",
    "application/x-protobuf": "proto",
    "application/json": "json",
    "application/connect+proto": "connect",
    "application/grpc-web+proto": "grpc-web",
    "application/grpc-web": "grpc-web",
}
_RUNSSE_TYPES: dict[str, StreamProtocol] = {
    "application/connect+proto": "connect",
    "application/proto": "connect",
    "application/grpc-web+proto": "grpc-web",
    "application/grpc-web": "grpc-web",
}


class ClientGone(Exception):
    """The client disconnected while we were reading its request."""


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _base_type(headers: dict[str, str]) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class HttpReply(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def content_type(self) -> str: ...

    @property
    def body(self) -> bytes: ...

    @property
    def headers(self) -> tuple[tuple[str, str], ...]: ...


class ExtraRoutes(Protocol):
    """Plain GET pages served beside the RPCs (metrics, dashboard) and an RPC outcome hook.
    Implemented by the composition root; the transport only routes to it."""

    def handles(self, path: str) -> bool: ...

    def is_public(self, path: str) -> bool: ...

    async def get(self, path: str, query: str = "") -> HttpReply | None: ...

    def observe_rpc(self, path: str, outcome: str) -> None: ...


class ConnectApp:
    """The ASGI application. `handler` runs each agent run (see sessions.RunHandler)."""

    def __init__(
        self,
        config: Config,
        handler: RunHandler,
        limits: TransportLimits | None = None,
        routes: ExtraRoutes | None = None,
    ) -> None:
        self.config = config
        self.routes = routes
        self.limits = limits or TransportLimits()
        self.registry = SessionRegistry(handler, self.limits)
        self.ready = False
        token = config.server.auth_token
        self._token = token.encode() if token else None
        self._runsse_type = config.server.runsse_content_type.encode("latin-1")

    # -- entry --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        if not self.ready:  # served without lifespan events
            self.registry.start()
            self.ready = True
        path: str = scope["path"]
        method: str = scope["method"]
        headers = _headers(scope)
        try:
            if path == HEALTH_PATH:
                await self._health(method, send)
            elif method in ("GET", "HEAD") and self.routes and self.routes.handles(path):
                await self._extra(path, scope, send, headers)
            elif method != "POST":
                await _plain(send, 404 if method in ("GET", "HEAD") else 405, b"not found\n")
            elif path == RUN_PATH:
                await self._run(
                    receive, send, headers, scope.get("extensions", {}).get(WRITE_NOWAIT)
                )
            elif path == RUNSSE_PATH:
                await self._runsse(receive, send, headers)
            else:
                await self._unary(path, receive, send, headers)
        except ClientGone:
            log.debug("client went away: %s", path)

    def start(self) -> None:
        """Ready to serve (the server calls this once it listens)."""
        self.registry.start()
        self.ready = True

    async def shutdown(self) -> None:
        self.ready = False
        await self.registry.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _extra(self, path: str, scope: Scope, send: Send, headers: dict[str, str]) -> None:
        assert self.routes is not None
        if not (self.routes.is_public(path) or self.authorized(headers)):
            await _plain(send, 401, b"missing or wrong bearer token\n")
            return
        query = scope.get("query_string", b"").decode("latin-1")
        reply = await self.routes.get(path, query)
        if reply is None:
            await _plain(send, 404, b"not found\n")
            return
        head = [(b"content-type", reply.content_type.encode("latin-1"))]
        head += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
        await send({"type": "http.response.start", "status": reply.status, "headers": head})
        await send({"type": "http.response.body", "body": reply.body, "more_body": False})

    def _observe(self, path: str, outcome: str) -> None:
        if self.routes is not None:
            self.routes.observe_rpc(path, outcome)

    async def _health(self, method: str, send: Send) -> None:
        if method not in ("GET", "HEAD"):
            await _plain(send, 405, b"method not allowed\n")
        elif self.ready:
            await _plain(send, 200, b"ok\n")
        else:
            await _plain(send, 503, b"starting\n")

    def authorized(self, headers: Mapping[str, str]) -> bool:
        """Whether the request's headers carry the configured bearer token (if any)."""
        if self._token is None:
            return True
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        ok = hmac.compare_digest(credentials.strip().encode("latin-1"), self._token)
        return ok and scheme.lower() == "bearer"

    # -- unary --------------------------------------------------------------------------------

    async def _unary(
        self, path: str, receive: Receive, send: Send, headers: dict[str, str]
    ) -> None:
        codec = _UNARY_CODECS.get(_base_type(headers))
        known = path == BIDI_APPEND_PATH or path in UNARY_METHODS
        if not self.authorized(headers):
            err = ConnectError("unauthenticated", "missing or wrong bearer token")
            await _unary_error(send, codec or "proto", err)
            self._observe(path, err.code)
            return
        if not known:
            await _unary_error(send, codec or "proto", ConnectError("unimplemented", path))
            return
        if codec is None:
            await _unsupported_media(send, headers, "application/proto or application/json")
            return
        try:
            declared = int(headers.get("content-length", "0") or 0)
        except ValueError:
            declared = 0
        try:
            if declared > self.limits.max_unary_body:
                raise ConnectError(
                    "resource_exhausted",
                    f"request of {declared} bytes exceeds {self.limits.max_unary_body}",
                )
            body = await _read_body(receive, self.limits.max_unary_body)
            raw = _unary_payload(body, codec, headers, self.limits.max_unary_body)
            if path == BIDI_APPEND_PATH:
                request = _parse(aiserver_pb2.BidiAppendRequest(), raw, codec)
                self._append(request, headers)
                response: Message = aiserver_pb2.BidiAppendResponse()
            else:
                method = UNARY_METHODS[path]
                request = _parse(method.request_type(), raw, codec)
                response = method.handler(request, UnaryContext(self.config, headers))
        except ConnectError as err:
            await _unary_error(send, codec, err)
            self._observe(path, err.code)
            return
        await _unary_ok(send, codec, response)
        self._observe(path, "ok")

    def _append(self, request: aiserver_pb2.BidiAppendRequest, headers: dict[str, str]) -> None:
        if request.data_binary:
            payload = request.data_binary
        else:
            try:
                payload = binascii.unhexlify(request.data)
            except (binascii.Error, ValueError):
                raise ConnectError("invalid_argument", "data is not valid hex") from None
        try:
            message = agent_pb2.AgentClientMessage.FromString(payload)
        except DecodeError:
            raise ConnectError("invalid_argument", "data is not an AgentClientMessage") from None
        request_id = request.request_id.request_id or headers.get("x-request-id", "")
        if not request_id:
            raise ConnectError("invalid_argument", "request_id is missing")
        session, _ = self.registry.get_or_create(request_id, "runsse", headers)
        session.append(request.append_seqno, message)

    # -- RunSSE -------------------------------------------------------------------------------

    async def _runsse(self, receive: Receive, send: Send, headers: dict[str, str]) -> None:
        protocol = _RUNSSE_TYPES.get(_base_type(headers))
        if protocol is None:
            await _unsupported_media(send, headers, CONNECT_PROTO)
            return
        ctype = GRPC_WEB_PROTO.encode() if protocol == "grpc-web" else self._runsse_type
        start = _stream_start(ctype, runsse=True)
        if not self.authorized(headers):
            err = ConnectError("unauthenticated", "missing or wrong bearer token")
            await _stream_error(send, start, protocol, err)
            return
        try:
            body = await _read_body(receive, MAX_RUNSSE_BODY)
            if protocol == "grpc-web":
                envelope_encoding = headers.get("grpc-encoding")
            else:
                envelope_encoding = headers.get("connect-content-encoding")
            raw = decode_unary_body(
                body,
                content_encoding=headers.get("content-encoding"),
                envelope_encoding=envelope_encoding,
                max_size=MAX_RUNSSE_BODY,
            )
            try:
                rid = agent_pb2.BidiRequestId.FromString(raw).request_id
            except DecodeError:
                raise ConnectError("invalid_argument", "body is not a BidiRequestId") from None
            rid = rid or headers.get("x-request-id", "")
            if not rid:
                raise ConnectError("invalid_argument", "request_id is missing")
            session, _ = self.registry.get_or_create(rid, "runsse", headers)
        except ConnectError as err:
            await _stream_error(send, start, protocol, err)
            return
        await send(start)
        gone = asyncio.Event()
        watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, gone, session))
        session.attach()
        try:
            await _write(send, HEARTBEAT_FRAME)
            await self._pump(send, session, protocol, gone)
        except ClientGone:
            pass
        finally:
            session.detach()
            watcher.cancel()

    # -- Run ----------------------------------------------------------------------------------

    async def _run(
        self,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        write_nowait: WriteNowait | None = None,
    ) -> None:
        if _base_type(headers) != CONNECT_PROTO:
            await _unsupported_media(send, headers, CONNECT_PROTO)
            return
        start = _stream_start(CONNECT_PROTO.encode())
        if not self.authorized(headers):
            err = ConnectError("unauthenticated", "missing or wrong bearer token")
            await _stream_error(send, start, "connect", err)
            return
        encoding = (headers.get("connect-content-encoding") or "identity").lower()
        if encoding not in ("identity", "gzip"):
            err = ConnectError("unimplemented", f"unsupported compression {encoding!r}")
            await _stream_error(send, start, "connect", err)
            return
        await send(start)
        gone = asyncio.Event()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Session] = loop.create_future()
        direct = _DirectRun(write_nowait, gone) if write_nowait is not None else None
        reader = loop.create_task(self._read_run(receive, headers, encoding, ready, gone, direct))
        session: Session | None = None
        try:
            # The reader first: when the first message came with the headers, the run starts
            # before the opening heartbeat is written, and the write overlaps its work.
            await asyncio.sleep(0)
            await _write(send, HEARTBEAT_FRAME)
            session = await self._await_session(send, ready, gone)
            if session is None:
                return
            if direct is not None:
                try:
                    await self._direct_heartbeats(session, direct, gone)
                finally:
                    session.detach_direct()
                return
            session.attach()
            try:
                await self._pump(send, session, "connect", gone)
            finally:
                session.detach()
        except ClientGone:
            pass
        finally:
            reader.cancel()
            if not ready.done():
                ready.cancel()
            if session is not None and gone.is_set():
                session.close_input()

    async def _await_session(
        self, send: Send, ready: asyncio.Future[Session], gone: asyncio.Event
    ) -> Session | None:
        """Wait for the first client message (it names the run), with heartbeats meanwhile."""
        deadline = time.monotonic() + self.limits.first_message_timeout
        while not ready.done():
            if gone.is_set():
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                err = ConnectError("deadline_exceeded", "no client message received")
                await _write(send, end_stream_frame(err), more=False)
                return None
            await asyncio.wait({ready}, timeout=min(self.limits.heartbeat_interval, left))
            if not ready.done() and not gone.is_set():
                await _write(send, HEARTBEAT_FRAME)
        try:
            return ready.result()
        except ConnectError as err:
            await _write(send, end_stream_frame(err), more=False)
            return None

    async def _read_run(
        self,
        receive: Receive,
        headers: dict[str, str],
        encoding: str,
        ready: asyncio.Future[Session],
        gone: asyncio.Event,
        direct: _DirectRun | None = None,
    ) -> None:
        reader = EnvelopeReader(self.limits.max_frame_size, encoding)
        session: Session | None = None
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    break
                for frame in reader.feed(message.get("body", b"")):
                    if frame.flags & FLAG_END_STREAM:
                        continue  # not sent by Connect clients; nothing to deliver
                    try:
                        msg = agent_pb2.AgentClientMessage.FromString(frame.payload)
                    except DecodeError:
                        raise ConnectError(
                            "invalid_argument", "frame is not an AgentClientMessage"
                        ) from None
                    if session is None:
                        session = self._create_run_session(msg, headers)
                        if direct is not None:
                            # Written from the run's own task as it sends: no hop through
                            # this stream's task for any message.
                            session.attach_direct(direct)
                        ready.set_result(session)
                    session.push(msg)
                if not message.get("more_body", False):
                    reader.close()
                    if session is None:
                        raise ConnectError("invalid_argument", "request stream has no message")
                    session.close_input()  # half-close: no more input, output continues
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    break
        except ConnectError as err:
            if session is None:
                if not ready.done():
                    ready.set_exception(err)
            else:
                session.fail(err)
            return
        gone.set()
        if session is not None:
            session.close_input()
            session.wake()

    def _create_run_session(
        self, first: agent_pb2.AgentClientMessage, headers: dict[str, str]
    ) -> Session:
        rid = headers.get("x-request-id") or ""
        if not rid and first.HasField("run_request"):
            rid = first.run_request.run_id
        rid = rid or str(uuid.uuid4())
        session, created = self.registry.get_or_create(rid, "run", headers)
        if not created:
            raise ConnectError("already_exists", f"request_id {rid!r} is already in use")
        return session

    # -- output -------------------------------------------------------------------------------

    async def _direct_heartbeats(
        self, session: Session, out: _DirectRun, gone: asyncio.Event
    ) -> None:
        """A `Run` whose messages are written as they are sent: only heartbeats are left to
        this task, and waiting for the end."""
        interval = self.limits.heartbeat_interval
        while not gone.is_set() and not out.closed:
            if session.finished:
                out.write_pending(session)  # the end, unless it went out already
                return
            idle = time.monotonic() - out.last_write
            if idle >= interval:
                out.heartbeat()
                continue
            await session.wait(len(session.history), interval - idle)

    async def _pump(
        self, send: Send, session: Session, protocol: StreamProtocol, gone: asyncio.Event
    ) -> None:
        """Write the session's history from the start, heartbeats while idle, then the end."""
        interval = self.limits.heartbeat_interval
        index = 0
        last_write = time.monotonic()
        while not gone.is_set():
            history = session.history
            if index < len(history):
                chunk = b"".join(history[index:])
                index = len(history)
                if session.finished:
                    # The last messages and the end-stream frame in one write (each ASGI send
                    # costs a full trip through the server's protocol layer).
                    await _write(send, chunk + _ending(protocol, session.ending), more=False)
                    return
                await _write(send, chunk)
                last_write = time.monotonic()
                continue
            if session.finished:
                await _write(send, _ending(protocol, session.ending), more=False)
                return
            idle = time.monotonic() - last_write
            if idle >= interval:
                await _write(send, HEARTBEAT_FRAME)
                last_write = time.monotonic()
                continue
            await session.wait(index, interval - idle)


class WriteNowait(Protocol):
    def __call__(self, body: bytes, more: bool = True) -> bool: ...


class _DirectRun:
    """The output of one HTTP/2 `Run`, written synchronously by whoever sends (see
    `Session.attach_direct`): a message sent after a quiet spell leaves in the call that sends
    it; what the same task sends right after (a burst of deltas) leaves together at the loop's
    next turn, in one write. The run's end goes out the same way, with the end-stream frame,
    and ends the HTTP/2 stream."""

    __slots__ = ("_gone", "_scheduled", "_write", "closed", "index", "last_write")

    def __init__(self, write: WriteNowait, gone: asyncio.Event) -> None:
        self._write = write
        self._gone = gone
        self._scheduled = False
        self.index = 0  # messages of the session's history written so far
        self.last_write = time.monotonic()
        self.closed = False

    def flush(self, session: Session) -> None:
        if self.closed or self._scheduled:
            return
        if self.write_pending(session) and not self.closed:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_later, session)

    def _flush_later(self, session: Session) -> None:
        self._scheduled = False
        if not self.closed:
            self.write_pending(session)

    def write_pending(self, session: Session) -> bool:
        """Write what the client has not had yet; False when there was nothing."""
        history = session.history
        end = session.finished
        if self.index == len(history) and not end:
            return False
        chunk = b"".join(history[self.index :])
        self.index = len(history)
        if end:
            chunk += end_stream_frame(session.ending)
        if not self._send(chunk, more=not end):
            session.wake()  # the stream's task is waiting on the session: let it see `gone`
        if end:
            self.closed = True
        return True

    def heartbeat(self) -> None:
        if not self.closed:
            self._send(HEARTBEAT_FRAME, more=True)

    def _send(self, data: bytes, *, more: bool) -> bool:
        self.last_write = time.monotonic()
        if self._write(data, more):
            return True
        self.closed = True
        self._gone.set()
        return False


def _ending(protocol: StreamProtocol, error: ConnectError | None) -> bytes:
    if protocol == "grpc-web":
        return grpc_web_trailers_frame(error)
    return end_stream_frame(error)


# ---------------------------------------------------------------------------------------------
# ASGI helpers
# ---------------------------------------------------------------------------------------------


async def _write(send: Send, data: bytes, *, more: bool = True) -> None:
    try:
        await send({"type": "http.response.body", "body": data, "more_body": more})
    except Exception as exc:  # granian raises once the client is gone
        raise ClientGone() from exc


async def _read_body(receive: Receive, limit: int) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        body += message.get("body", b"")
        if len(body) > limit:
            raise ConnectError("resource_exhausted", f"request body exceeds {limit} bytes")
        if not message.get("more_body", False):
            return bytes(body)


async def _watch_disconnect(receive: Receive, gone: asyncio.Event, session: Session) -> None:
    with contextlib.suppress(Exception):
        while (await receive())["type"] != "http.disconnect":
            pass
    gone.set()
    session.wake()


def _stream_start(content_type: bytes, *, runsse: bool = False) -> AsgiMessage:
    headers = [(b"content-type", content_type)]
    if runsse:
        headers += [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
    return {"type": "http.response.start", "status": 200, "headers": headers}


async def _stream_error(
    send: Send, start: AsgiMessage, protocol: StreamProtocol, err: ConnectError
) -> None:
    """A streaming RPC that fails before its first message: HTTP 200 and the end frame."""
    await send(start)
    await _write(send, _ending(protocol, err), more=False)


async def _plain(send: Send, status: int, body: bytes, ctype: bytes = b"text/plain") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _unsupported_media(send: Send, headers: dict[str, str], accepted: str) -> None:
    err = ConnectError(
        "unimplemented",
        f"unsupported content-type {headers.get('content-type', '')!r}; use {accepted}",
    )
    body = err.unary_body()
    await send(
        {
            "type": "http.response.start",
            "status": 415,
            "headers": [
                (b"content-type", b"application/json"),
                (b"accept-post", accepted.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _unary_payload(body: bytes, codec: UnaryCodec, headers: dict[str, str], limit: int) -> bytes:
    if codec == "json":
        return decompress(body, headers.get("content-encoding"), limit)
    if codec == "grpc-web":
        envelope_encoding = headers.get("grpc-encoding")
    else:
        envelope_encoding = headers.get("connect-content-encoding")
    return decode_unary_body(
        body,
        content_encoding=headers.get("content-encoding"),
        envelope_encoding=envelope_encoding,
        enveloped=None if codec == "proto" else True,
        max_size=limit,
    )


def _parse(message: Message, raw: bytes, codec: UnaryCodec) -> Any:
    try:
        if codec == "json":
            json_format.Parse(raw.decode("utf-8") or "{}", message, ignore_unknown_fields=True)
        else:
            message.ParseFromString(raw)
    except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
        name = message.DESCRIPTOR.full_name
        raise ConnectError("invalid_argument", f"cannot decode {name}: {exc}") from None
    return message


async def _unary_ok(send: Send, codec: UnaryCodec, response: Message) -> None:
    if codec == "json":
        await _plain(send, 200, json_format.MessageToJson(response).encode(), b"application/json")
    elif codec == "proto":
        await _plain(send, 200, response.SerializeToString(), b"application/proto")
    elif codec == "connect":
        body = encode_envelope(response.SerializeToString()) + end_stream_frame()
        await _plain(send, 200, body, CONNECT_PROTO.encode())
    else:
        body = encode_envelope(response.SerializeToString()) + grpc_web_trailers_frame()
        await _plain(send, 200, body, GRPC_WEB_PROTO.encode())


async def _unary_error(send: Send, codec: UnaryCodec, err: ConnectError) -> None:
    if codec == "connect":
        await _plain(send, 200, end_stream_frame(err), CONNECT_PROTO.encode())
    elif codec == "grpc-web":
        await _plain(send, 200, grpc_web_trailers_frame(err), GRPC_WEB_PROTO.encode())
    else:
        await _plain(send, err.http_status, err.unary_body(), b"application/json")


# ---------------------------------------------------------------------------------------------
# Serving with granian
# ---------------------------------------------------------------------------------------------


def check_bind(config: Config, host: str) -> None:
    """Refuse to serve a non-loopback address without a token."""
    if not is_loopback(host) and not config.server.auth_token:
        raise ConfigError(
            f"server.auth_token is required when serving on {host!r} (not loopback); "
            "set a token or bind to 127.0.0.1"
        )


class ListenError(Exception):
    """The server could not listen on its address (port in use, no permission, bad address)."""


_OS_ERROR = re.compile(r"\(os error (\d+)\)")
_LISTEN_HINTS = {
    errno.EADDRINUSE: "another process is listening there; stop it, or choose another port "
    "(--port or server.port)",
    errno.EACCES: "ports below 1024 need privileges; choose a port from 1024 up",
    errno.EADDRNOTAVAIL: "the address is not one of this machine's (server.host)",
}


def listen_error(exc: BaseException, host: str, port: int) -> ListenError | None:
    """granian reports a socket it could not open as RuntimeError("... (os error N)"), with a
    Rust backtrace when RUST_BACKTRACE is set: turn that into one readable line."""
    found = _OS_ERROR.search(str(exc)) if isinstance(exc, RuntimeError | OSError) else None
    code = int(found.group(1)) if found else getattr(exc, "errno", None)
    if not isinstance(code, int):
        return None
    hint = _LISTEN_HINTS.get(code)
    reason = os.strerror(code) + (f": {hint}" if hint else "")
    return ListenError(f"cannot listen on {host}:{port}: {reason}")


def bind_address(host: str, port: int) -> str:
    """The IP address to listen on for `host`: granian takes IP literals only (a name such as
    "localhost" made it raise "invalid IP address syntax"). Names resolve like a listening
    socket's (IPv4 first); a name that does not resolve is a ListenError."""
    literal = host.strip("[]")
    try:
        return str(ipaddress.ip_address(literal))
    except ValueError:
        pass
    if host.lower() in ("localhost", "localhost.localdomain"):
        return "127.0.0.1"
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ListenError(
            f"cannot listen on {host}:{port}: not an address of this machine ({reason}); "
            "set server.host to an IP address such as 127.0.0.1"
        ) from None
    ipv4 = [info for info in found if info[0] == socket.AF_INET]
    return str((ipv4 or found)[0][4][0])


def url_of(scheme: str, host: str, port: int) -> str:
    """A URL for a host and port (IPv6 literals in brackets)."""
    bare = host.strip("[]")
    return f"{scheme}://[{bare}]:{port}" if ":" in bare else f"{scheme}://{host}:{port}"


def _granian_server(
    app: ConnectApp,
    host: str,
    port: int,
    *,
    quiet: bool,
    on_listening: Callable[[], None] | None = None,
) -> Any:
    from granian.constants import HTTPModes, Interfaces, SSLProtocols
    from granian.log import LogLevels
    from granian.server.embed import Server

    cfg = app.config.server
    tls: dict[str, Any] = {}
    if cfg.certificate and cfg.private_key:
        tls = {
            "ssl_cert": Path(cfg.certificate),
            "ssl_key": Path(cfg.private_key),
            "ssl_protocol_min": SSLProtocols.tls12,
        }
    # RSGI, not ASGI: granian's ASGI send costs tens to hundreds of microseconds per chunk on
    # the loop's thread, its RSGI send about 2 µs (see rsgi.py).
    server = Server(
        # The body of an unauthenticated request is never read (not even its first chunk).
        RsgiBridge(app, on_start=_then(app.start, on_listening), may_read_body=app.authorized),
        address=bind_address(host, port),
        port=port,
        interface=Interfaces.RSGI,
        http=HTTPModes.auto,
        backlog=4096,
        log_enabled=not quiet,
        log_level=LogLevels.warning,
        **tls,
    )
    logging.getLogger("_granian").addFilter(_drop_embed_warning)
    return server


def native_threads_not_started_by_python() -> frozenset[int]:
    """Ids of this process's threads that Python did not start: granian's Rust runtime. Empty
    where /proc is missing (then there is nothing to wait for). A foreign thread that asked
    `threading` who it is shows up there as a dummy thread: it still counts as foreign."""
    try:
        tids = {int(tid) for tid in os.listdir("/proc/self/task")}
    except OSError:
        return frozenset()
    ours = {t.native_id for t in threading.enumerate() if not isinstance(t, threading._DummyThread)}
    return frozenset(tids - ours)


async def wait_for_native_threads(before: frozenset[int], timeout: float = 5.0) -> bool:
    """Wait until the threads granian started have exited; True when they have.

    Why: granian's future resolves while its runtime threads are still dropping the last
    connections' Python objects. A thread that asks for the GIL once the interpreter is
    finalizing is ended with a forced unwind, which aborts the process (SIGABRT, "panic in a
    function that cannot unwind") instead of a clean exit on SIGTERM."""
    deadline = time.monotonic() + timeout
    while native_threads_not_started_by_python() - before:
        if time.monotonic() > deadline:
            logging.getLogger(__name__).warning(
                "granian's threads had not exited %.1f s after the server stopped", timeout
            )
            return False
        await asyncio.sleep(0.005)
    return True


def _then(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    if then is None:
        return first

    def both() -> None:
        first()
        then()

    return both


def _drop_embed_warning(record: logging.LogRecord) -> bool:
    # granian's embedded mode warns that it is experimental on every start; we chose it knowingly
    # (docs/transport.md) and the warning would only alarm users.
    return "experimental" not in record.getMessage()


async def serve_async(
    config: Config,
    handler: RunHandler,
    *,
    limits: TransportLimits | None = None,
    host: str | None = None,
    port: int | None = None,
    stop: asyncio.Event | None = None,
    install_signals: bool = True,
    quiet: bool = False,
    routes: ExtraRoutes | None = None,
    on_server_created: Callable[[], None] | None = None,
    on_listening: Callable[[], None] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM (or until `stop` is set), in the running event loop.
    `on_listening` runs once the socket is open. Raises ListenError when it cannot be."""
    host = host or config.server.host
    port = config.server.port if port is None else port
    check_bind(config, host)
    app = ConnectApp(config, handler, limits, routes)
    threads_before = native_threads_not_started_by_python()
    server = _granian_server(app, host, port, quiet=quiet, on_listening=on_listening)
    if on_server_created is not None:
        on_server_created()  # e.g. re-install log redaction on handlers granian just added
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    if install_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    task = loop.create_task(server.serve())

    async def _stopper() -> None:
        await stop.wait()
        server.stop()

    stopper = loop.create_task(_stopper())
    try:
        try:
            await task
        except (RuntimeError, OSError) as exc:
            if app.ready or (error := listen_error(exc, host, port)) is None:
                raise
            raise error from None
    finally:
        stopper.cancel()
        await app.shutdown()
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        await wait_for_native_threads(threads_before)


def serve(
    config: Config,
    handler: RunHandler,
    *,
    limits: TransportLimits | None = None,
    host: str | None = None,
    port: int | None = None,
) -> int:
    """Blocking entry for app.py: serve until interrupted. Returns an exit status."""
    check_bind(config, host or config.server.host)
    scheme = "https" if config.server.certificate else "http"
    url = url_of(scheme, host or config.server.host, config.server.port if port is None else port)

    def listening() -> None:
        print(f"cursor-byok: serving on {url}", file=sys.stderr)

    try:
        asyncio.run(
            serve_async(
                config, handler, limits=limits, host=host, port=port, on_listening=listening
            )
        )
    except ListenError as exc:
        print(f"cursor-byok: {exc}", file=sys.stderr)
        return 2
    return 0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


async def probe_health(host: str, port: int, *, tls: bool = False, timeout: float = 1.0) -> bool:
    """GET /healthz with a bare socket (cheap: no HTTP client, no CA bundle); True on 200."""
    ctx: ssl.SSLContext | None = None
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
            try:
                request = f"GET {HEALTH_PATH} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"
                writer.write(request.encode())
                await writer.drain()
                status_line = await reader.readline()
            finally:
                writer.close()
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    return status_line.split(b" ")[1:2] == [b"200"]


def probe_health_blocking(host: str, port: int, *, tls: bool = False, timeout: float = 1.0) -> bool:
    """Blocking twin of `probe_health`, for code outside an event loop."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            sock: socket.socket = raw
            if tls:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                sock = ctx.wrap_socket(raw)
            sock.sendall(
                f"GET {HEALTH_PATH} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n".encode()
            )
            status_line = sock.makefile("rb").readline()
    except (OSError, ssl.SSLError):
        return False
    return status_line.split(b" ")[1:2] == [b"200"]


async def _wait_healthy(
    host: str, port: int, tls: bool, timeout: float, task: asyncio.Task[None] | None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if task is not None and task.done():
            task.result()
            raise RuntimeError("server stopped during start-up")
        if await probe_health(host, port, tls=tls):
            return
        await asyncio.sleep(0.005)
    raise TimeoutError(f"server on {host}:{port} not healthy after {timeout} s")


@dataclass(frozen=True, slots=True)
class RunningServer:
    base_url: str
    host: str
    port: int
    app: ConnectApp | None = None  # in-process servers only
    startup_s: float = 0.0
    process: subprocess.Popen[bytes] | None = None  # child-process servers only


@asynccontextmanager
async def running_server(
    config: Config,
    handler: RunHandler,
    *,
    limits: TransportLimits | None = None,
    port: int | None = None,
    timeout: float = 10.0,
) -> AsyncIterator[RunningServer]:
    """An in-process server (granian embedded in the current event loop) on a free loopback
    port, ready when entered."""
    host = config.server.host if is_loopback(config.server.host) else "127.0.0.1"
    port = port or free_port(host)
    check_bind(config, host)
    t0 = time.monotonic()
    app = ConnectApp(config, handler, limits)
    server = _granian_server(app, host, port, quiet=True)
    task = asyncio.get_running_loop().create_task(server.serve())
    scheme = "https" if config.server.certificate else "http"
    url = url_of(scheme, host, port)
    try:
        await _wait_healthy(host, port, scheme == "https", timeout, task)
        yield RunningServer(url, host, port, app, time.monotonic() - t0)
    finally:
        server.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        await app.shutdown()


@contextmanager
def server_process(
    config_path: str | Path,
    *,
    handler: str,
    port: int | None = None,
    heartbeat: float | None = None,
    orphan_timeout: float | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 20.0,
) -> Iterator[RunningServer]:
    """A server in a child process (`python -m cursor_byok.transport.server`) on a free
    loopback port; `handler` is `module:attribute`. Waits for /healthz, stops it on exit."""
    config = load_config(config_path, env=env)
    host = config.server.host
    port = port or free_port(host)
    cmd = [sys.executable, "-m", "cursor_byok.transport.server", "--config", str(config_path)]
    cmd += ["--handler", handler, "--port", str(port)]
    if heartbeat is not None:
        cmd += ["--heartbeat", str(heartbeat)]
    if orphan_timeout is not None:
        cmd += ["--orphan-timeout", str(orphan_timeout)]
    scheme = "https" if config.server.certificate else "http"
    url = url_of(scheme, "127.0.0.1" if host == "localhost" else host, port)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})})
    try:
        tls = scheme == "https"
        probe_host = "127.0.0.1" if host == "localhost" else host
        while not probe_health_blocking(probe_host, port, tls=tls):
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with status {proc.returncode}")
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"server at {url} not healthy after {timeout} s")
            time.sleep(0.02)
        yield RunningServer(url, host, port, None, time.monotonic() - t0, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load_handler(spec: str) -> RunHandler:
    module, _, attr = spec.partition(":")
    handler: RunHandler = getattr(importlib.import_module(module), attr or "handler")
    return handler


def main(argv: list[str] | None = None) -> int:
    """`python -m cursor_byok.transport.server --config FILE --handler module:attr`."""
    parser = argparse.ArgumentParser(prog="cursor_byok.transport.server")
    parser.add_argument("--config", required=True)
    parser.add_argument("--handler", required=True, help="module:attribute of a RunHandler")
    parser.add_argument("--host")
    parser.add_argument("--port", type=port_number)
    parser.add_argument("--heartbeat", type=float, help="server heartbeat interval, seconds")
    parser.add_argument("--orphan-timeout", type=float)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        check_bind(config, args.host or config.server.host)
    except ConfigError as exc:
        print(f"cursor-byok: configuration error: {exc}", file=sys.stderr)
        return 2
    overrides: dict[str, Any] = {}
    if args.heartbeat is not None:
        overrides["heartbeat_interval"] = args.heartbeat
    if args.orphan_timeout is not None:
        overrides["orphan_timeout"] = args.orphan_timeout
    limits = TransportLimits(**overrides)
    return serve(config, load_handler(args.handler), limits=limits, host=args.host, port=args.port)


if __name__ == "__main__":
    raise SystemExit(main())
