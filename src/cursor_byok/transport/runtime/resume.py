"""A run reopened after a restart: its run request, read back from the store.

A client on the HTTP/1.1 shim that reconnects after a restart opens `RunSSE` again with the
same request id and does not send its appends again, so the server keeps each shim run's
request (`Store.save_run`) and finds it by request id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ...store.api import Store
from ..connect.channel import Incoming, RunChannel


async def first_message(channel: RunChannel, store: Store, *, resumable: bool) -> Incoming | None:
    """The run request: from the client, or from the store when this request_id is known.
    Both are asked at once; the first that has it wins (they hold the same bytes)."""
    if not resumable:
        return await channel.receive()
    received = asyncio.ensure_future(channel.receive())
    stored = asyncio.ensure_future(store.find_run(channel.request_id))
    try:
        await asyncio.wait({received, stored}, return_when=asyncio.FIRST_COMPLETED)
        if received.done():
            return received.result()
        record = await stored
        if record is None:
            return await received
        received.cancel()  # an inbox get: cancelling it loses nothing
        # The client counts on from its appends to the server that is gone: its next one is
        # our next input (else its answers wait forever for appends this process never saw).
        channel.continue_client_numbering()
        return Incoming(f"{channel.request_id}:0", record.request, record.request)
    finally:
        if not stored.done():
            stored.add_done_callback(consume_exception)
        elif not received.done():
            received.cancel()


def consume_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
