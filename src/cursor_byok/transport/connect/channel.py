"""One run's conversation with a client, independent of how it travels.

The HTTP/2 `Run` stream and the HTTP/1.1 `RunSSE` + `BidiAppend` pair both present a run to the
runtime as a `RunChannel`: client messages arrive in order, once each, with a stable input id, and
server messages leave through one ordered queue. The transport owns framing, ordering by
`append_seqno`, duplicate drops, heartbeats, replay on reconnect and the end-stream frame.
Messages are opaque here: serialized bytes out, and in, the bytes with whatever the service's
parser made of them (service.py); this package knows no protobuf and no Cursor.
"""

from __future__ import annotations

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
