"""Per-`request_id` run sessions for both transports.

A `Session` is the `RunChannel` a run handler sees. Input: client messages in protocol order
(`append_seqno` on the shim, arrival order on `Run`), each once. Output: an ordered history of
encoded envelopes, kept whole so that a `RunSSE` re-opened with the same `request_id` replays
everything from the start and then follows the live tail. The ending (success or a Connect
error) is kept apart from the history because its encoding depends on the protocol of the
subscriber (Connect end-stream frame or gRPC-Web trailers).

The `SessionRegistry` creates sessions on first sight (RunSSE or BidiAppend may come first),
runs one handler task per session, and forgets finished sessions after `finished_grace`. A run
whose client is gone for good is told so (`watch_gone`) and ends by itself: an HTTP/2 `Run`
the client closed at once, a `RunSSE` not reopened for `orphan_timeout` (its reconnect grace),
every run at shutdown; one that does not watch, or is still going `stop_grace` later, has its
task cancelled. What sessions hold is counted in bytes
(ledger.py). A run that has had no message in order yet (append_seqno 0 on the shim) has not
started: it expires after `unstarted_timeout` and, while it waits, counts against its client's
allowance, so a flood of appends for new request ids cannot fill the table. When the table is
full, finished runs nobody reads are forgotten first, oldest first: they are kept only for a
replay that may never be asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from .channel import EndError, Gone, Incoming, StreamGone
from .envelopes import ConnectError, ErrorDetail
from .envelopes import encode_envelope as _envelope
from .ledger import MIB, RUN_COST, Ledger, size_text
from .limits import TransportLimits as TransportLimits  # where it used to be defined
from .run_info import FORWARDED_HEADERS as FORWARDED_HEADERS
from .run_info import PRINCIPAL_HEADER as PRINCIPAL_HEADER
from .run_info import RunHandler as RunHandler
from .run_info import RunStartInfo as RunStartInfo
from .run_info import Transport as Transport

log = logging.getLogger(__name__)


class DirectOutput(Protocol):
    """A subscriber that writes synchronously: the session hands it every message the moment
    it is sent (and the ending the moment the run finishes), with no task in between."""

    def flush(self, session: Session) -> None: ...


def end_error_to_connect(error: EndError, details_type: str) -> ConnectError:
    details = [ErrorDetail(details_type, error.details)] if error.details else []
    return ConnectError(error.code, error.message, details)


class Session:
    """One run: ordered inbox, replayable outbox. Implements `RunChannel`."""

    def __init__(
        self,
        request_id: str,
        transport: Transport,
        *,
        max_held: int = 1024,
        max_held_bytes: int = 64 * MIB,
        max_output_bytes: int = 256 * MIB,
        clock: Callable[[], float] = time.monotonic,
        error_details_type: str = "",
        client: str = "",
        ledger: Ledger | None = None,
        on_finish: Callable[[Session], None] | None = None,
        waiting: bool = True,
        parse: Callable[[bytes], object] | None = None,
    ) -> None:
        self._request_id = request_id
        self._details_type = error_details_type
        self.transport: Transport = transport
        self._clock = clock
        self._max_held = max_held
        self._max_held_bytes = max_held_bytes
        self._max_output_bytes = max_output_bytes
        self.client = client  # whose allowance it counts against until it starts
        self._ledger = ledger
        self._on_finish = on_finish
        # Held appends keep only their bytes and are parsed again when delivered: a parsed
        # message holds a copy of its fields, which doubled what a held append cost.
        self._parse = parse
        self.started = False  # see `_begin`
        self.awaiting_start = waiting  # neither started nor finished (ledger.py)
        self._inbox: asyncio.Queue[Incoming | None] = asyncio.Queue()
        self._next_seqno = 0
        self._held: dict[int, tuple[bytes, object]] = {}
        self._adopt_next = False  # take the next append's seqno as the next in order
        self.held_bytes = 0
        self._input_closed = False
        self.history: list[bytes] = []
        self.history_bytes = 0
        self._finished = False
        self.ending: ConnectError | None = None
        self._changed = asyncio.Event()
        self.created_at = clock()
        self.finished_at: float | None = None
        self.subscribers = 0
        self.detached_at = self.created_at
        self.task: asyncio.Task[None] | None = None
        self.info: RunStartInfo | None = None
        self.duplicates = 0
        self._direct: DirectOutput | None = None
        self._router: Callable[[Incoming], None] | None = None
        self._gone_watch: Callable[[StreamGone], None] | None = None
        self.gone: StreamGone | None = None  # the client's stream is gone for good
        self.gone_at: float | None = None  # when the run was told so

    # -- RunChannel ---------------------------------------------------------------------------

    @property
    def request_id(self) -> str:
        return self._request_id

    async def receive(self) -> Incoming | None:
        item = await self._inbox.get()
        if item is None:
            self._inbox.put_nowait(None)  # every later receive() also ends
        return item

    def route(self, handler: Callable[[Incoming], None] | None) -> None:
        self._router = handler
        if handler is None:
            return
        self._begin()  # e.g. a resumed run: its first message came from the store
        while not self._inbox.empty():
            item = self._inbox.get_nowait()
            if item is None:  # input ended: receive() keeps saying so
                self._inbox.put_nowait(None)
                return
            self._hand_over(handler, item)

    def _hand_over(self, handler: Callable[[Incoming], None], item: Incoming) -> None:
        try:
            handler(item)
        except Exception:  # the transport's reading must go on
            log.exception("run %s: routing a client message failed", self._request_id)

    def watch_gone(self, handler: Callable[[StreamGone], None] | None) -> None:
        self._gone_watch = handler
        if handler is not None and self.gone is not None and self.gone_at is None:
            self._tell(self.gone)

    @property
    def watched(self) -> bool:
        return self._gone_watch is not None

    def lose(self, gone: StreamGone) -> None:
        """The client's stream is gone for good (`gone` says how): tell the run, once. A run
        that does not watch hears of it if it starts watching; the reaper ends it."""
        if self._finished or self.gone is not None:
            return
        self.gone = gone
        if self._gone_watch is not None:
            self._tell(gone)

    def _tell(self, gone: StreamGone) -> None:
        self.gone_at = self._clock()
        watch = self._gone_watch
        if watch is None:
            return
        try:
            watch(gone)
        except Exception:  # the transport goes on
            log.exception("run %s: telling the run its client is gone failed", self._request_id)

    def continue_client_numbering(self) -> None:
        if self._next_seqno == 0:
            self._next_seqno = 1  # position 0 is the run request, read from the store
        if self._held:
            self._adopt(min(self._held))
        else:
            self._adopt_next = True

    def _adopt(self, seqno: int) -> None:
        """Start in-order delivery at `seqno` (see `continue_client_numbering`)."""
        self._adopt_next = False
        self._next_seqno = max(self._next_seqno, seqno)
        self._deliver_held()

    def send(self, frame: bytes) -> None:
        if self._finished:
            log.debug("run %s: dropping a message sent after finish", self._request_id)
            return
        frame = _envelope(frame)
        try:
            if self.history_bytes + len(frame) > self._max_output_bytes:
                limit = size_text(self._max_output_bytes)
                raise ConnectError(
                    "resource_exhausted",
                    f"the run's output exceeds {limit}, the most one run may keep for replay",
                )
            if self._ledger is not None:  # `_charge`, one call less per frame
                self._ledger.charge(self, len(frame))
        except ConnectError as err:
            log.warning("run %s: ending the run: %s", self._request_id, err.message)
            self.fail(err)
            return
        self.history.append(frame)
        self.history_bytes += len(frame)
        if self._direct is not None:
            self._direct.flush(self)  # written already: no subscriber needs waking
            return
        self._wake()

    def finish(self, error: EndError | None = None) -> None:
        self._finish(None if error is None else end_error_to_connect(error, self._details_type))

    @property
    def finished(self) -> bool:
        return self._finished

    # -- transport side -----------------------------------------------------------------------

    def _finish(self, error: ConnectError | None) -> None:
        if self._finished:
            return
        self._finished = True
        self.ending = error
        self.finished_at = self._clock()
        self.close_input()
        self._settle()
        if self._on_finish is not None:
            self._on_finish(self)
        if self._direct is not None:
            self._direct.flush(self)
        self._wake()

    def fail(self, error: ConnectError) -> None:
        """End the run because of a transport-level problem (bad input, client gone): the run
        hears why (`watch_gone`), then its task is cancelled."""
        if not self._finished and self._gone_watch is not None:
            self._tell(StreamGone(Gone.FAILED, detail=error.message))
        self._finish(error)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def close_input(self) -> None:
        """No more client messages: `receive()` returns None from now on."""
        if not self._input_closed:
            self._input_closed = True
            self._held.clear()
            self._release(self.held_bytes)
            self.held_bytes = 0
            self._inbox.put_nowait(None)

    @property
    def input_closed(self) -> bool:
        return self._input_closed

    def push(self, payload: bytes, message: object) -> None:
        """`Run`: messages arrive in order on one stream; the position is the sequence number."""
        self.append(self._next_seqno, payload, message)

    def append(self, seqno: int, payload: bytes, message: object) -> bool:
        """Shim: deliver in `append_seqno` order. False for a duplicate (or after input end)."""
        if seqno < 0:
            raise ConnectError("invalid_argument", f"append_seqno must be >= 0, got {seqno}")
        if self._input_closed:
            return False
        if seqno < self._next_seqno or seqno in self._held:
            self.duplicates += 1
            return False
        if self._adopt_next:
            self._adopt_next = False
            self._next_seqno = seqno
        if seqno > self._next_seqno:
            if len(self._held) >= self._max_held:
                raise ConnectError(
                    "resource_exhausted",
                    f"too many out-of-order appends held (limit {self._max_held}); "
                    f"waiting for append_seqno {self._next_seqno}",
                )
            if self.held_bytes + len(payload) > self._max_held_bytes:
                raise ConnectError(
                    "resource_exhausted",
                    f"out-of-order appends held for this run would exceed "
                    f"{size_text(self._max_held_bytes)}; waiting for append_seqno "
                    f"{self._next_seqno}",
                )
            self._charge(len(payload))  # raises, holding nothing more, when there is no room
            self._held[seqno] = (payload, None if self._parse is not None else message)
            self.held_bytes += len(payload)
            return True
        self._deliver(payload, message)
        self._deliver_held()
        return True

    def _deliver_held(self) -> None:
        """Deliver the held appends that are next in order, releasing what they held."""
        while self._next_seqno in self._held:
            held, msg = self._held.pop(self._next_seqno)
            self.held_bytes -= len(held)
            self._release(len(held))
            self._deliver(held, msg if self._parse is None else self._parse(held))

    def _deliver(self, payload: bytes, message: object) -> None:
        self._begin()
        incoming = Incoming(f"{self._request_id}:{self._next_seqno}", payload, message)
        self._next_seqno += 1
        if self._router is not None:
            self._hand_over(self._router, incoming)
        else:
            self._inbox.put_nowait(incoming)

    @property
    def next_seqno(self) -> int:
        return self._next_seqno

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def cost(self) -> int:
        """The bytes this run is charged for (ledger.py)."""
        return RUN_COST + self.held_bytes + self.history_bytes

    def _charge(self, n: int) -> None:
        if self._ledger is not None:
            self._ledger.charge(self, n)

    def _release(self, n: int) -> None:
        if self._ledger is not None and n:
            self._ledger.refund(self, n)

    def _begin(self) -> None:
        """The run has its first message (from the client, or from the store for a resumed
        run, whose handler then routes): from now on it is a run that started."""
        self.started = True
        self._settle()

    def _settle(self) -> None:
        if self.awaiting_start:
            self.awaiting_start = False
            if self._ledger is not None:
                self._ledger.settled(self)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def wake(self) -> None:
        """Wake every waiting subscriber (e.g. because its client went away)."""
        self._wake()

    async def wait(self, index: int, timeout: float) -> None:
        """Return when history has grown past `index`, the run ended, `wake()` was called, or
        `timeout` seconds passed."""
        if len(self.history) > index or self._finished:
            return
        event = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()

    def attach(self) -> None:
        self.subscribers += 1

    def attach_direct(self, output: DirectOutput) -> None:
        """The only subscriber of this session (an HTTP/2 `Run`) writes synchronously; what
        was sent before it came is written now."""
        self.attach()
        self._direct = output
        output.flush(self)

    def detach_direct(self) -> None:
        if self._direct is not None:
            self._direct = None
            self.detach()

    def detach(self) -> None:
        self.subscribers -= 1
        if self.subscribers == 0:
            self.detached_at = self._clock()
