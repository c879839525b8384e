"""A run's first message: its run request, from the client or, for a run reopened after a
restart, read back from the store; and the writes a run does not wait for.

A client on the HTTP/1.1 shim that reconnects after a restart opens `RunSSE` again with the
same request id and does not send its appends again, so the server keeps each shim run's
request (`Store.save_run`) and finds it by request id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from ...store.api import RunRecord, Store
from ..connect.channel import Incoming, RunChannel
from ..cursor import ClientLink, Malformed, RunRequest, RunRequested, bad_request_end
from .conversation import NotYours
from .ending import RunFailed

log = logging.getLogger("cursor_byok.runtime")


async def first_message(
    channel: RunChannel, store: Store, resumable: bool, person: str | None = None
) -> Incoming | None:
    """The run request: from the client, or from the store when this request_id is known.
    Both are asked at once; the first that has it wins (they hold the same bytes). A stored
    run is `person`'s to resume only when it was made under their token (None: the operator,
    who resumes any): refused before it claims its conversation, so another person's stream
    reopened on another replica never moves the run it names (`NotYours`)."""
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
        if person is not None and record.owner_id != person:
            raise NotYours(
                f"request_id {channel.request_id!r} belongs to a run someone else started"
            )
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


def save_run_request(
    store: Store,
    channel: RunChannel,
    first: Incoming,
    cid: str,
    now_ms: int,
    person: str | None = None,
) -> asyncio.Future[Any]:
    """Keep a RunSSE's run request, by which a reopened run finds it (`first_message`), and
    the run's person (None: the operator), whose appends alone replicas take for it. Not
    awaited by the caller at once: queued before the run's first commit, it usually shares
    its transaction; the run awaits it once it has begun."""
    record = RunRecord(
        request_id=channel.request_id,
        conversation_id=cid,
        request=first.payload,
        created_at_ms=now_ms,
        owner_id=person,
    )
    return asyncio.ensure_future(store.save_run(record))


def run_request_of(link: ClientLink, first: Incoming) -> RunRequest:
    """The run request the run's first message carries; anything else ends it as a bad
    request."""
    match link.receive(first.message):
        case RunRequested(request=request):
            return request
        case Malformed(error=error):
            raise RunFailed(bad_request_end(error))
        case _:
            raise RunFailed(bad_request_end("the first message of a run must be a run_request"))


class BackgroundWrites:
    """Writes nobody waits for; a failure is logged, never lost silently."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self._tasks: set[asyncio.Future[Any]] = set()

    def __call__(self, work: Awaitable[Any], what: str) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        request_id = self.request_id

        def done(future: asyncio.Future[Any]) -> None:
            self._tasks.discard(future)
            if not future.cancelled() and (exc := future.exception()) is not None:
                log.error("run %s: saving %s failed: %s", request_id, what, exc)

        task.add_done_callback(done)
