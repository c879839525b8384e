"""Serve the ASGI-shaped `ConnectApp` through granian's RSGI interface.

Why: on HTTP/2 streams granian's ASGI `send` cost a mean of 37-59 µs of CPU per body chunk on
the event loop's thread, with spikes past 300 µs, while its RSGI `send_bytes` cost about 2 µs
(measured in docs/benchmarks-server.md). A turn writes several chunks, so that was milliseconds
per turn on the thread that runs every conversation.

`ConnectApp` keeps its plain ASGI shape (a standard interface its tests drive directly); this
bridge maps the handful of ASGI messages it uses onto RSGI calls: the request body as
`http.request` messages, then `http.disconnect` once the client is gone; the response start is
held until the first body chunk, and a response with a single chunk is sent in one piece.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Protocol

AsgiMessage = MutableMapping[str, Any]

# ASGI scope extension: `write_nowait(body: bytes, more: bool = True) -> bool`.
WRITE_NOWAIT = "cursor_byok.write_nowait"
AsgiApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[AsgiMessage]],
        Callable[[AsgiMessage], Awaitable[None]],
    ],
    Awaitable[None],
]


class _StreamTransport(Protocol):
    async def send_bytes(self, data: bytes) -> None: ...


class _HttpProto(Protocol):
    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def client_disconnect(self) -> None: ...

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None: ...

    def response_stream(self, status: int, headers: list[tuple[str, str]]) -> _StreamTransport: ...


class _Receive:
    __slots__ = ("_body", "_done", "_next", "_proto")

    def __init__(self, proto: _HttpProto) -> None:
        self._proto = proto
        self._body: AsyncIterator[bytes] | None = None
        self._next: Awaitable[bytes] | None = None
        self._done = False

    def prefetch(self) -> None:
        """Ask granian for the first body chunk now: its reader hands it over from another
        thread, and that wait overlaps the application's own setup instead of following it."""
        if self._body is None:
            self._body = aiter(self._proto)
            self._next = anext(self._body)

    def close(self) -> None:
        pending, self._next = self._next, None
        cancel = getattr(pending, "cancel", None)
        if cancel is not None:
            cancel()  # a body the application never asked for

    async def __call__(self) -> AsgiMessage:
        if not self._done:
            if self._body is None:
                self._body = aiter(self._proto)
            pending, self._next = self._next, None
            try:
                chunk = await (pending if pending is not None else anext(self._body))
            except StopAsyncIteration:
                self._done = True
                return {"type": "http.request", "body": b"", "more_body": False}
            except Exception:  # the connection broke while the body was still coming
                self._done = True
                return {"type": "http.disconnect"}
            return {"type": "http.request", "body": bytes(chunk), "more_body": True}
        await self._proto.client_disconnect()
        return {"type": "http.disconnect"}


class _Send:
    __slots__ = ("_ended", "_headers", "_proto", "_status", "_stream")

    def __init__(self, proto: _HttpProto) -> None:
        self._proto = proto
        self._status = 200
        self._headers: list[tuple[str, str]] = []
        self._stream: _StreamTransport | None = None
        self._ended = False

    async def __call__(self, message: AsgiMessage) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self._status = int(message["status"])
            self._headers = [
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", ())
            ]
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if self._ended:
            raise RuntimeError("the response has ended")
        body = bytes(message.get("body", b""))
        if self._stream is None:
            if not message.get("more_body", False):
                self._proto.response_bytes(self._status, self._headers, body)
                return
            self._stream = self._proto.response_stream(self._status, self._headers)
        if body:
            await self._stream.send_bytes(body)

    def write_nowait(self, body: bytes, more: bool = True) -> bool:
        """Write a body chunk of a streamed response now, from synchronous code; False once the
        client is gone. granian's `send_bytes` hands the bytes to its writer synchronously and
        returns an awaitable that is already finished (or already failed), so driving that
        awaitable one step tells the outcome without a trip through the event loop. With
        `more` false the response ends: the transport is let go, which is what ends the stream
        in granian (see `close`)."""
        if self._ended:
            return False
        if self._stream is None:
            self._stream = self._proto.response_stream(self._status, self._headers)
        ok = _finished_ok(self._stream.send_bytes(body)) if body else True
        if not more or not ok:
            self._ended = True
            self._stream = None
        return ok

    def close(self) -> None:
        """Let go of the response stream. granian ends it when its transport is freed, not
        when the handler returns: a traceback kept by a failed future (a reference cycle)
        would otherwise hold an HTTP/2 stream open until the next garbage collection."""
        self._stream = None
        self._ended = True


def _peer(client: str) -> tuple[str, int] | None:
    """ASGI's `(host, port)` from RSGI's `"host:port"` (IPv6 hosts may come bracketed)."""
    host, _, port = client.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _finished_ok(awaitable: Awaitable[None]) -> bool:
    """True when a finished awaitable succeeded, False when it failed. granian's sends are
    always finished when returned (the bytes were handed over during the call); one that is
    not would be counted as sent, and the client's departure is then noticed by the reader."""
    try:
        next(awaitable.__await__())  # granian's awaitables are iterators, not generators
    except StopIteration:
        return True
    except Exception:
        return False
    return True


class RsgiBridge:
    """The RSGI application granian runs; `app` is the ASGI application it serves."""

    def __init__(
        self,
        app: AsgiApp,
        on_start: Callable[[], None] | None = None,
        may_read_body: Callable[[Mapping[str, str]], bool] | None = None,
    ) -> None:
        """`may_read_body(headers)`: whether a POST's body may be asked for before the
        application runs (e.g. only once its credentials are right); None: always."""
        self.app = app
        self._on_start = on_start
        self._may_read_body = may_read_body

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._on_start is not None:
            self._on_start()

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        pass  # the owner shuts the application down after the server stopped

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return  # no websockets here; granian closes the connection
        receive = _Receive(proto)
        if scope.method == "POST" and (
            self._may_read_body is None or self._may_read_body(scope.headers)
        ):
            receive.prefetch()
        asgi_scope: dict[str, Any] = {
            "type": "http",
            "http_version": scope.http_version,
            "scheme": scope.scheme,
            "method": scope.method,
            "path": scope.path,
            "query_string": scope.query_string.encode("latin-1"),
            "client": _peer(getattr(scope, "client", "")),
            "headers": [
                (k.encode("latin-1"), v.encode("latin-1")) for k, v in scope.headers.items()
            ],
        }
        send = _Send(proto)
        # Synchronous writes for callers that can use them (ConnectApp's Run streams).
        asgi_scope["extensions"] = {WRITE_NOWAIT: send.write_nowait}
        try:
            await self.app(asgi_scope, receive, send)
        finally:
            receive.close()
            send.close()
