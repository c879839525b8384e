"""The two streaming RPCs: `Run` (HTTP/2 bidi) and `RunSSE` (the HTTP/1.1 shim's stream).

Both feed a run's `Session` (sessions.py) and write what it sends. `Run` reads the request body
while it writes (full duplex): the first message names the run and starts it. On granian's
RSGI the run's own task writes each message as it sends it (`_DirectRun`, one write per burst);
a `RunSSE` (which may come and go and replays from the start) writes from its own task.
Heartbeats go out after `heartbeat_interval` of silence, first thing on every stream.

Each returns the stream's outcome for the RPC counter: "ok", the Connect code it ended with,
`CANCELED` when the client went away before the run's end, or `UNSUPPORTED_MEDIA` (HTTP 415).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Protocol

from .channel import Gone, StreamGone
from .envelopes import (
    FLAG_END_STREAM,
    ConnectError,
    EnvelopeReader,
    decode_unary_body,
    encode_envelope,
    end_stream_frame,
)
from .http import (
    CONNECT_PROTO,
    GRPC_WEB_PROTO,
    ClientGone,
    Receive,
    Send,
    StreamProtocol,
    auth_error_text,
    base_type,
    ending,
    read_body,
    stream_error,
    stream_start,
    unsupported_media,
    watch_disconnect,
    write,
)
from .relay import RelayedAppends
from .service import Service
from .session_registry import SessionRegistry
from .sessions import Session, TransportLimits

MAX_RUNSSE_BODY = 64 * 1024
CANCELED = "canceled"
UNSUPPORTED_MEDIA = "unsupported_media_type"  # answered with HTTP 415, no Connect error

_RUNSSE_TYPES: dict[str, StreamProtocol] = {
    "application/connect+proto": "connect",
    "application/proto": "connect",
    "application/grpc-web+proto": "grpc-web",
    "application/grpc-web": "grpc-web",
}


class Streams:
    """The streaming half of the app: one per server, shared by every stream."""

    def __init__(
        self,
        service: Service,
        registry: SessionRegistry,
        limits: TransportLimits,
        runsse_content_type: str,
        *,
        relayed: RelayedAppends | None = None,
    ) -> None:
        self.service = service
        self.registry = registry
        self.relayed = relayed
        self.limits = limits
        self.heartbeat_frame = encode_envelope(service.heartbeat)
        self._runsse_type = runsse_content_type.encode("latin-1")

    async def runsse(
        self,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        authorized: bool,
        client: str = "",
    ) -> str:
        protocol = _RUNSSE_TYPES.get(base_type(headers))
        if protocol is None:
            await unsupported_media(send, headers, CONNECT_PROTO)
            return UNSUPPORTED_MEDIA
        ctype = GRPC_WEB_PROTO.encode() if protocol == "grpc-web" else self._runsse_type
        start = stream_start(ctype, runsse=True)
        if not authorized:
            err = ConnectError("unauthenticated", auth_error_text(headers))
            await stream_error(send, start, protocol, err)
            return err.code
        try:
            body = await read_body(receive, MAX_RUNSSE_BODY)
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
                rid = self.service.parse_stream_open(raw)
            except ValueError as exc:
                raise ConnectError("invalid_argument", str(exc)) from None
            rid = rid or headers.get("x-request-id", "")
            if not rid:
                raise ConnectError("invalid_argument", "request_id is missing")
            session, created = self.registry.get_or_create(rid, "runsse", headers, client)
            if self.relayed is not None and created:
                # What was stored before, here or elsewhere; the client's allowance of runs
                # waiting to start is counted over every replica as it is read.
                self.relayed.opened(session, client)
            elif self.relayed is not None:
                self.relayed.catch_up(session)
        except ConnectError as err:
            await stream_error(send, start, protocol, err)
            return err.code
        await send(start)
        gone = asyncio.Event()
        watcher = asyncio.get_running_loop().create_task(watch_disconnect(receive, gone, session))
        session.attach()
        try:
            await write(send, self.heartbeat_frame)
            await self._pump(send, session, protocol, gone)
        except ClientGone:
            pass
        finally:
            session.detach()
            watcher.cancel()
        return _outcome(session)

    async def run(
        self,
        receive: Receive,
        send: Send,
        headers: dict[str, str],
        authorized: bool,
        write_nowait: WriteNowait | None = None,
        client: str = "",
    ) -> str:
        if base_type(headers) != CONNECT_PROTO:
            await unsupported_media(send, headers, CONNECT_PROTO)
            return UNSUPPORTED_MEDIA
        start = stream_start(CONNECT_PROTO.encode())
        if not authorized:
            err = ConnectError("unauthenticated", auth_error_text(headers))
            await stream_error(send, start, "connect", err)
            return err.code
        encoding = (headers.get("connect-content-encoding") or "identity").lower()
        if encoding not in ("identity", "gzip"):
            err = ConnectError("unimplemented", f"unsupported compression {encoding!r}")
            await stream_error(send, start, "connect", err)
            return err.code
        await send(start)
        gone = asyncio.Event()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Session] = loop.create_future()
        direct = (
            _DirectRun(write_nowait, gone, self.heartbeat_frame)
            if write_nowait is not None
            else None
        )
        reader = loop.create_task(
            self._read_run(receive, headers, encoding, ready, gone, direct, client)
        )
        session: Session | None = None
        outcome = CANCELED
        try:
            # The reader first: when the first message came with the headers, the run starts
            # before the opening heartbeat is written, and the write overlaps its work.
            await asyncio.sleep(0)
            await write(send, self.heartbeat_frame)
            session, outcome = await self._await_session(send, ready, gone)
            if session is None:
                return outcome
            if direct is not None:
                try:
                    await self._direct_heartbeats(session, direct, gone)
                finally:
                    session.detach_direct()
                return _outcome(session)
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
                # A `Run` cannot be reopened: its run is told at once (it cancels the turn
                # and ends the model call), unless it has ended already.
                session.lose(StreamGone(Gone.CLOSED))
        return outcome if session is None else _outcome(session)

    async def _await_session(
        self, send: Send, ready: asyncio.Future[Session], gone: asyncio.Event
    ) -> tuple[Session | None, str]:
        """Wait for the first client message (it names the run), with heartbeats meanwhile.
        Without a session, the second value is how the stream ended."""
        deadline = time.monotonic() + self.limits.first_message_timeout
        while not ready.done():
            if gone.is_set():
                return None, CANCELED
            left = deadline - time.monotonic()
            if left <= 0:
                err = ConnectError("deadline_exceeded", "no client message received")
                await write(send, end_stream_frame(err), more=False)
                return None, err.code
            await asyncio.wait({ready}, timeout=min(self.limits.heartbeat_interval, left))
            if not ready.done() and not gone.is_set():
                await write(send, self.heartbeat_frame)
        try:
            return ready.result(), CANCELED
        except ConnectError as err:
            await write(send, end_stream_frame(err), more=False)
            return None, err.code

    async def _read_run(
        self,
        receive: Receive,
        headers: dict[str, str],
        encoding: str,
        ready: asyncio.Future[Session],
        gone: asyncio.Event,
        direct: _DirectRun | None = None,
        client: str = "",
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
                        msg = self.service.parse_client(frame.payload)
                    except ValueError as exc:
                        raise ConnectError("invalid_argument", f"frame is {exc}") from None
                    if session is None:
                        session = self._create_run_session(msg, headers, client)
                        if direct is not None:
                            # Written from the run's own task as it sends: no hop through
                            # this stream's task for any message.
                            session.attach_direct(direct)
                        ready.set_result(session)
                    session.push(frame.payload, msg)
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

    def _create_run_session(self, first: object, headers: dict[str, str], client: str) -> Session:
        rid = headers.get("x-request-id") or self.service.stream_request_id(first)
        rid = rid or str(uuid.uuid4())
        session, created = self.registry.get_or_create(
            rid, "run", headers, client, first_message=True
        )
        if not created:
            raise ConnectError("already_exists", f"request_id {rid!r} is already in use")
        return session

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
                    await write(send, chunk + ending(protocol, session.ending), more=False)
                    return
                await write(send, chunk)
                last_write = time.monotonic()
                continue
            if session.finished:
                await write(send, ending(protocol, session.ending), more=False)
                return
            idle = time.monotonic() - last_write
            if idle >= interval:
                await write(send, self.heartbeat_frame)
                last_write = time.monotonic()
                continue
            await session.wait(index, interval - idle)


def _outcome(session: Session) -> str:
    """How the RPC ended: the run's ending once it finished, else the client went away first
    (a RunSSE may come back for the same run; that is a request of its own)."""
    if not session.finished:
        return CANCELED
    return "ok" if session.ending is None else session.ending.code


class WriteNowait(Protocol):
    def __call__(self, body: bytes, more: bool = True) -> bool: ...


class _DirectRun:
    """The output of one HTTP/2 `Run`, written synchronously by whoever sends (see
    `Session.attach_direct`): a message sent after a quiet spell leaves in the call that sends
    it; what the same task sends right after (a burst of deltas) leaves together at the loop's
    next turn, in one write. The run's end goes out the same way, with the end-stream frame,
    and ends the HTTP/2 stream."""

    __slots__ = ("_gone", "_heartbeat", "_scheduled", "_write", "closed", "index", "last_write")

    def __init__(self, write: WriteNowait, gone: asyncio.Event, heartbeat: bytes) -> None:
        self._write = write
        self._heartbeat = heartbeat
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
            self._send(self._heartbeat, more=True)

    def _send(self, data: bytes, *, more: bool) -> bool:
        self.last_write = time.monotonic()
        if self._write(data, more):
            return True
        self.closed = True
        self._gone.set()
        return False
