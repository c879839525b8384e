"""What a run asks its client and waits for: blobs, its context, answers to interaction queries.

The dialect (`ClientLink`) builds each request and gives it an id; this module sends it and keeps
one future per id, resolved from the run's message routing the moment the answer arrives (no
task in between). An answer nobody waits for is reported back to the caller as stray.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import assert_never

from ..connect.channel import RunChannel
from ..cursor import (
    BlobReceived,
    BlobStored,
    ClientContext,
    ClientLink,
    ContextReceived,
    DefinitionRead,
    InteractionAnswered,
)

Answer = BlobReceived | BlobStored | ContextReceived | DefinitionRead | InteractionAnswered


class ClientTimeout(Exception):
    """The client did not answer a request in time; `what` names the request."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"the client did not answer {what} within {seconds:g} s")
        self.what = what


class ClientRequests:
    def __init__(self, channel: RunChannel, link: ClientLink, timeout_s: float) -> None:
        self.channel = channel
        self.link = link
        self.timeout_s = timeout_s
        self._kv: dict[int, asyncio.Future[Answer]] = {}
        self._exec: dict[int, asyncio.Future[Answer]] = {}
        self._interactions: dict[int, asyncio.Future[Answer]] = {}

    def resolve(self, answer: Answer) -> bool:
        """Hand `answer` to its waiter; False when nothing waits for it."""
        match answer:
            case BlobReceived(kv_id=key) | BlobStored(kv_id=key):
                waiters = self._kv
            case ContextReceived(exec_id=key) | DefinitionRead(exec_id=key):
                waiters = self._exec
            case InteractionAnswered(id=key):
                waiters = self._interactions
            case _:
                assert_never(answer)
        future = waiters.pop(key, None)
        if future is None or future.done():
            return False
        future.set_result(answer)
        return True

    def _wait(self, waiters: dict[int, asyncio.Future[Answer]], key: int) -> asyncio.Future[Answer]:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        waiters[key] = future
        return future

    async def _answer(
        self,
        waiters: dict[int, asyncio.Future[Answer]],
        key: int,
        future: asyncio.Future[Answer],
        what: str,
        timeout: float | None = None,
    ) -> Answer:
        if future.done():
            # Answered already (the turn's checkpoint blob, acknowledged while the turn's last
            # commit was written): awaiting it would not wait, so no timer is armed for it.
            waiters.pop(key, None)
            return future.result()
        limit = self.timeout_s if timeout is None else timeout
        try:
            async with asyncio.timeout(limit):  # one loop turn less than wait_for
                return await future
        except TimeoutError:
            raise ClientTimeout(what, limit) from None
        finally:
            waiters.pop(key, None)

    async def blobs(self, blob_ids: Sequence[bytes]) -> list[BlobReceived]:
        """The client's answers for these blobs (`data` None: it has none, `error` says why
        when it said), asked for all at once: one round trip."""
        asked = []
        for blob in blob_ids:
            kv_id, frame = self.link.get_blob(blob)
            asked.append((kv_id, self._wait(self._kv, kv_id)))
            self.channel.send(frame)
        out: list[BlobReceived] = []
        for kv_id, future in asked:
            answer = await self._answer(self._kv, kv_id, future, "a blob request")
            if not isinstance(answer, BlobReceived):
                answer = BlobReceived(kv_id=kv_id, data=None)
            out.append(answer)
        return out

    async def blobs_within(self, blob_ids: Sequence[bytes]) -> list[BlobReceived | None]:
        """Like `blobs`, but one deadline (`timeout_s`) for all of them, and a blob the client
        has not answered by then is None instead of an error: the caller goes on without it."""
        asked = []
        for blob in blob_ids:
            kv_id, frame = self.link.get_blob(blob)
            asked.append((kv_id, self._wait(self._kv, kv_id)))
            self.channel.send(frame)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        out: list[BlobReceived | None] = []
        for kv_id, future in asked:
            left = max(0.0, deadline - loop.time())
            try:
                answer = await self._answer(self._kv, kv_id, future, "a blob request", left)
            except ClientTimeout:
                out.append(None)
                continue
            if not isinstance(answer, BlobReceived):
                answer = BlobReceived(kv_id=kv_id, data=None)
            out.append(answer)
        return out

    async def definitions(self, paths: Sequence[str]) -> dict[str, DefinitionRead]:
        """Each MCP definition file's read, asked for all at once with one deadline
        (`timeout_s`); a file not answered by then is a failed read."""
        asked = []
        for path in paths:
            exec_id, frame = self.link.read_definition(path)
            asked.append((path, exec_id, self._wait(self._exec, exec_id)))
            self.channel.send(frame)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        out: dict[str, DefinitionRead] = {}
        for path, exec_id, future in asked:
            try:
                answer = await asyncio.wait_for(future, max(0.0, deadline - loop.time()))
            except TimeoutError:
                self._exec.pop(exec_id, None)
                answer = DefinitionRead(exec_id, None, "the client did not answer in time")
            out[path] = (
                answer
                if isinstance(answer, DefinitionRead)
                else DefinitionRead(exec_id, None, "no answer")
            )
        return out

    async def context(self) -> ClientContext | None:
        exec_id, frame = self.link.request_context()
        future = self._wait(self._exec, exec_id)
        self.channel.send(frame)
        answer = await self._answer(self._exec, exec_id, future, "the request for its context")
        return answer.context if isinstance(answer, ContextReceived) else None

    def store_blob(self, data: bytes) -> tuple[int, asyncio.Future[Answer]]:
        """Send a set_blob now; the caller awaits the acknowledgement later (`stored`)."""
        kv_id, frame = self.link.set_blob(data)
        future = self._wait(self._kv, kv_id)
        self.channel.send(frame)
        return kv_id, future

    async def stored(self, kv_id: int, future: asyncio.Future[Answer], timeout: float) -> bool:
        """Whether the client stored the blob of `store_blob` (False on timeout or error)."""
        try:
            answer = await self._answer(self._kv, kv_id, future, "a blob write", timeout)
        except ClientTimeout:
            return False
        return isinstance(answer, BlobStored) and answer.ok

    def forget(self, kv_id: int, future: asyncio.Future[Answer]) -> None:
        self._kv.pop(kv_id, None)
        future.cancel()

    async def ask(
        self, frame_for: Callable[[int], bytes], what: str, timeout: float | None = None
    ) -> InteractionAnswered:
        """Send an interaction query and wait for its answer. `frame_for(id)` builds the query's
        frame for the id the link allocates; the answer with that id resolves the wait."""
        query_id = self.link.next_interaction_id()
        future = self._wait(self._interactions, query_id)
        self.channel.send(frame_for(query_id))
        answer = await self._answer(self._interactions, query_id, future, what, timeout)
        assert isinstance(answer, InteractionAnswered)
        return answer
