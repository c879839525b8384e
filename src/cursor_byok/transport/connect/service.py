"""What the Connect layer needs to know of the service it serves, and nothing more.

The HTTP app (app.py) frames, orders, replays and authenticates; it does not know what the
messages mean. A `Service` names its streaming paths, parses what the app must look into (the
request id of a stream, an append's sequence number and payload) and answers its unary RPCs.
The Cursor dialect implements it (transport/cursor/service.py); tests/connect/test_toy_service.py
serves a toy echo service through the same app.

Parsers raise ValueError for bytes they cannot read; the app answers `invalid_argument` with
the error's text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

# How a unary body is encoded, once its envelope and compression are off.
Codec = Literal["proto", "json"]


@dataclass(frozen=True, slots=True)
class Append:
    """One client message sent on the HTTP/1.1 shim."""

    request_id: str  # "" when the body names none (the x-request-id header may)
    seqno: int
    payload: bytes
    message: object  # what `Service.parse_client` made of the payload


# (decoded request body, its codec, the request headers) -> the encoded response, same codec
# (or an awaitable of it: an answer that reads the store or calls a model).
UnaryHandler: TypeAlias = Callable[[bytes, Codec, Mapping[str, str]], bytes | Awaitable[bytes]]


class Service(Protocol):
    run_path: str  # the bidi stream (HTTP/2)
    runsse_path: str  # the server stream of the HTTP/1.1 shim
    append_path: str  # the unary that carries the shim's client messages
    heartbeat: bytes  # the message written when a stream has been quiet
    error_details_type: str  # the message name of EndError.details

    def parse_client(self, payload: bytes) -> object:
        """A client message of a stream, parsed (handed to the run as `Incoming.message`)."""
        ...

    def stream_request_id(self, first: object) -> str:
        """The request id the first message of a bidi stream names ("" for none)."""
        ...

    def parse_stream_open(self, raw: bytes) -> str:
        """The request id of a RunSSE request body ("" for none)."""
        ...

    def parse_append(self, raw: bytes, codec: Codec) -> Append: ...

    def append_response(self, codec: Codec) -> bytes: ...

    def unary(self, path: str) -> UnaryHandler | None:
        """The handler of a unary RPC path, None for a path the service does not have."""
        ...
