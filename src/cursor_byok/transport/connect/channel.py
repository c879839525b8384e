"""One run's conversation with a client, independent of how it travels.

The HTTP/2 `Run` stream and the HTTP/1.1 `RunSSE` + `BidiAppend` pair both present a run to the
runtime as a `RunChannel`: client messages arrive in order, once each, with a stable input id, and
server messages leave through one ordered queue. The transport owns framing, ordering by
`append_seqno`, duplicate drops, heartbeats, replay on reconnect and the end-stream frame.
Messages are opaque here: serialized bytes out, and in, the bytes with whatever the service's
parser made of them (service.py); this package knows no protobuf and no Cursor.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Incoming:
    """A client message, in order. `input_id` is stable across retransmissions of the same
    message: `request_id:append_seqno` on the shim, `request_id:position` on `Run`.
    `payload` is the message's bytes, `message` what the service's parser made of them."""

    input_id: str
    payload: bytes
    message: object


@dataclass(frozen=True, slots=True)
class EndError:
    """How a failed run ends: a Connect error code and message, with optional error-details
    bytes for the end-stream `details` list (of the service's `error_details_type`)."""

    code: str  # Connect code: canceled, unavailable, invalid_argument, internal, ...
    message: str
    details: bytes | None = None


class Gone(enum.Enum):
    """Why a run's client stream will carry nothing more while the run has not ended."""

    CLOSED = "closed"  # the client closed its HTTP/2 `Run` stream, which cannot be reopened
    EXPIRED = "expired"  # a `RunSSE` was not reopened within the reconnect grace
    SHUTDOWN = "shutdown"  # the server is stopping (the client was told `unavailable`)
    FAILED = "failed"  # the transport ends the run (`detail` says why); its task is canceled


@dataclass(frozen=True, slots=True)
class StreamGone:
    why: Gone
    grace_s: float = 0.0  # EXPIRED: the grace that passed
    detail: str = ""  # FAILED: the transport's error


class RunChannel(Protocol):
    @property
    def request_id(self) -> str: ...

    async def receive(self) -> Incoming | None:
        """The next client message; None once the client has finished sending or went away."""
        ...

    def route(self, handler: Callable[[Incoming], None] | None) -> None:
        """From now on hand each client message to `handler` as it arrives, in order, instead
        of queueing it for `receive()` (messages already queued go first). It runs inside the
        transport's own reading, so it must be quick and must not raise. None stops routing."""
        ...

    def watch_gone(self, handler: Callable[[StreamGone], None] | None) -> None:
        """From now on call `handler` (once) when the client's stream is gone for good while
        the run goes on, or the transport ends the run: at once for a closed HTTP/2 `Run`,
        when the reconnect grace of a `RunSSE` passes, at shutdown (a stream gone before this
        call is reported now). It runs inside the transport: quick, never raising. A run that
        watches then ends by itself; past the transport's stop grace its task is canceled.
        None stops watching."""
        ...

    def continue_client_numbering(self) -> None:
        """The run's first message came from the store, not from this client connection (a
        shim run reopened after a restart): the client's appends go on from wherever its own
        numbering stands, so the next one it sends is taken as the next in order, whatever
        its number (the server that saw the ones before it is gone)."""
        ...

    def send(self, frame: bytes) -> None:
        """Queue one serialized message for the client. Never blocks; order is preserved."""
        ...

    def finish(self, error: EndError | None = None) -> None:
        """End the stream: `{}` end-stream on success, `{"error": ...}` otherwise. Idempotent."""
        ...

    @property
    def finished(self) -> bool: ...
