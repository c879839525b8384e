"""ASGI helpers of the Connect app: reading bodies, writing responses and errors.

The app is ASGI-shaped (a standard interface its tests drive directly); granian serves it
through rsgi.py. Streaming RPCs answer HTTP 200 and carry errors in their end-stream frame;
unary RPCs answer with the HTTP status of the Connect code table.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Literal, Protocol

from .envelopes import (
    ConnectError,
    decode_unary_body,
    decompress,
    encode_envelope,
    end_stream_frame,
    grpc_web_trailers_frame,
)

Scope = MutableMapping[str, Any]
AsgiMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[AsgiMessage]]
Send = Callable[[AsgiMessage], Awaitable[None]]
StreamProtocol = Literal["connect", "grpc-web"]
UnaryCodec = Literal["proto", "json", "connect", "grpc-web"]

CONNECT_PROTO = "application/connect+proto"
GRPC_WEB_PROTO = "application/grpc-web+proto"


class ClientGone(Exception):
    """The client disconnected while we were reading its request or writing the answer."""


class Wakeable(Protocol):
    def wake(self) -> None: ...


# What `headers_of` gives a request's Authorization when it came more than once: no credential
# can equal it (a header value never holds NUL), so such a request is never authorized.
REPEATED_AUTHORIZATION = "\x00repeated"


def headers_of(scope: Scope) -> dict[str, str]:
    """Header values by lower-case name (the last of a repeated name), except that a repeated
    Authorization is marked as such: which of two credentials counts would be a guess."""
    out: dict[str, str] = {}
    for k, v in scope["headers"]:
        name = k.decode("latin-1").lower()
        repeated = name == "authorization" and name in out
        out[name] = REPEATED_AUTHORIZATION if repeated else v.decode("latin-1")
    return out


def auth_error_text(headers: Mapping[str, str]) -> str:
    """Why a request was refused as unauthenticated."""
    if headers.get("authorization") == REPEATED_AUTHORIZATION:
        return "the request carries more than one Authorization header; send exactly one"
    return "missing or wrong bearer token"


def base_type(headers: dict[str, str]) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def ending(protocol: StreamProtocol, error: ConnectError | None) -> bytes:
    if protocol == "grpc-web":
        return grpc_web_trailers_frame(error)
    return end_stream_frame(error)


async def write(send: Send, data: bytes, *, more: bool = True) -> None:
    try:
        await send({"type": "http.response.body", "body": data, "more_body": more})
    except Exception as exc:  # granian raises once the client is gone
        raise ClientGone() from exc


async def read_body(receive: Receive, limit: int) -> bytes:
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


async def watch_disconnect(receive: Receive, gone: asyncio.Event, session: Wakeable) -> None:
    with contextlib.suppress(Exception):
        while (await receive())["type"] != "http.disconnect":
            pass
    gone.set()
    session.wake()


def stream_start(content_type: bytes, *, runsse: bool = False) -> AsgiMessage:
    headers = [(b"content-type", content_type)]
    if runsse:
        headers += [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
    return {"type": "http.response.start", "status": 200, "headers": headers}


async def stream_error(
    send: Send, start: AsgiMessage, protocol: StreamProtocol, err: ConnectError
) -> None:
    """A streaming RPC that fails before its first message: HTTP 200 and the end frame."""
    await send(start)
    await write(send, ending(protocol, err), more=False)


async def plain(send: Send, status: int, body: bytes, ctype: bytes = b"text/plain") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def unsupported_media(send: Send, headers: dict[str, str], accepted: str) -> None:
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


def unary_payload(body: bytes, codec: UnaryCodec, headers: dict[str, str], limit: int) -> bytes:
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


async def unary_ok(send: Send, codec: UnaryCodec, response: bytes) -> None:
    """A unary response: `response` is the encoded message (JSON for the json codec)."""
    if codec == "json":
        await plain(send, 200, response, b"application/json")
    elif codec == "proto":
        await plain(send, 200, response, b"application/proto")
    elif codec == "connect":
        body = encode_envelope(response) + end_stream_frame()
        await plain(send, 200, body, CONNECT_PROTO.encode())
    else:
        body = encode_envelope(response) + grpc_web_trailers_frame()
        await plain(send, 200, body, GRPC_WEB_PROTO.encode())


async def unary_error(send: Send, codec: UnaryCodec, err: ConnectError) -> None:
    if codec == "connect":
        await plain(send, 200, end_stream_frame(err), CONNECT_PROTO.encode())
    elif codec == "grpc-web":
        await plain(send, 200, grpc_web_trailers_frame(err), GRPC_WEB_PROTO.encode())
    else:
        await plain(send, err.http_status, err.unary_body(), b"application/json")
