"""The synchronous output of an HTTP/2 `Run` (streams._DirectRun, Session.attach_direct)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from cursor_byok.transport.connect.channel import EndError
from cursor_byok.transport.connect.envelopes import encode_envelope, end_stream_frame
from cursor_byok.transport.connect.rsgi import RsgiBridge, _Send
from cursor_byok.transport.connect.sessions import Session, end_error_to_connect
from cursor_byok.transport.connect.streams import _DirectRun
from cursor_byok.transport.cursor import HEARTBEAT
from tests.support.connect_client import text_delta

HEARTBEAT_FRAME = encode_envelope(HEARTBEAT)
DETAILS = "aiserver.v1.ErrorDetails"


class Transport:
    def __init__(self, ok: bool = True) -> None:
        self.writes: list[tuple[bytes, bool]] = []
        self.ok = ok

    def __call__(self, body: bytes, more: bool = True) -> bool:
        self.writes.append((body, more))
        return self.ok


def frame(text: str) -> bytes:
    return encode_envelope(text_delta(text).SerializeToString())


async def test_a_message_after_a_quiet_spell_leaves_inside_send() -> None:
    transport, gone = Transport(), asyncio.Event()
    session = Session("r", "run")
    # Sent before the stream attached: written on attach.
    session.send(text_delta("before").SerializeToString())
    session.attach_direct(_DirectRun(transport, gone, HEARTBEAT_FRAME))
    assert transport.writes == [(frame("before"), True)]
    await asyncio.sleep(0)  # the loop turns: nothing more to write
    session.send(text_delta("a").SerializeToString())
    assert transport.writes[-1] == (frame("a"), True)  # no loop turn needed


async def test_a_burst_goes_out_in_one_write_at_the_next_loop_turn() -> None:
    transport, gone = Transport(), asyncio.Event()
    session = Session("r", "run")
    session.attach_direct(_DirectRun(transport, gone, HEARTBEAT_FRAME))
    for text in ("a", "b", "c"):
        session.send(text_delta(text).SerializeToString())
    assert transport.writes == [(frame("a"), True)]
    await asyncio.sleep(0)
    assert transport.writes == [(frame("a"), True), (frame("b") + frame("c"), True)]


async def test_finish_writes_the_end_with_the_rest_and_ends_the_stream() -> None:
    transport, gone = Transport(), asyncio.Event()
    session = Session("r", "run")
    out = _DirectRun(transport, gone, HEARTBEAT_FRAME)
    session.attach_direct(out)
    session.send(text_delta("a").SerializeToString())
    session.send(text_delta("b").SerializeToString())
    session.finish(EndError("unavailable", "provider down"))
    await asyncio.sleep(0)
    down = EndError("unavailable", "provider down")
    ending = end_stream_frame(end_error_to_connect(down, DETAILS))
    assert transport.writes == [(frame("a"), True), (frame("b") + ending, False)]
    assert out.closed
    session.send(text_delta("late").SerializeToString())  # dropped: the run finished
    out.heartbeat()
    await asyncio.sleep(0)
    assert len(transport.writes) == 2


async def test_a_failed_write_marks_the_client_gone_and_wakes_the_stream() -> None:
    transport, gone = Transport(ok=False), asyncio.Event()
    session = Session("r", "run")
    out = _DirectRun(transport, gone, HEARTBEAT_FRAME)
    session.attach_direct(out)
    waiter = asyncio.ensure_future(session.wait(0, 5))
    await asyncio.sleep(0)
    session.send(text_delta("a").SerializeToString())
    await asyncio.wait_for(waiter, 1)  # woken, not left to its timeout
    assert gone.is_set() and out.closed
    session.send(text_delta("b").SerializeToString())
    assert len(transport.writes) == 1  # nothing more is tried


async def test_heartbeats_only_while_open() -> None:
    transport, gone = Transport(), asyncio.Event()
    out = _DirectRun(transport, gone, HEARTBEAT_FRAME)
    out.heartbeat()
    assert transport.writes == [(HEARTBEAT_FRAME, True)]


class _Done:
    """An awaitable like granian's: finished when returned (an iterator, not a generator)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def __await__(self) -> _Done:
        return self

    def __iter__(self) -> _Done:
        return self

    def __next__(self) -> None:
        if self.error is not None:
            raise self.error
        raise StopIteration


class _Stream:
    def __init__(self, fail: bool) -> None:
        self.sent: list[bytes] = []
        self.fail = fail

    def send_bytes(self, data: bytes) -> _Done:
        self.sent.append(data)
        return _Done(RuntimeError("stream closed") if self.fail else None)


class _Proto:
    def __init__(self, fail: bool = False) -> None:
        self.streams: list[_Stream] = []
        self.fail = fail

    def response_stream(self, status: int, headers: list[tuple[str, str]]) -> _Stream:
        self.streams.append(_Stream(self.fail))
        return self.streams[-1]


def test_bridge_write_nowait_reads_granians_finished_awaitables() -> None:
    proto = _Proto()
    send = _Send(proto)  # type: ignore[arg-type]
    assert send.write_nowait(b"one") and send.write_nowait(b"two", more=False)
    assert len(proto.streams) == 1 and proto.streams[0].sent == [b"one", b"two"]
    assert not send.write_nowait(b"after the end")  # ended: nothing is written
    assert proto.streams[0].sent == [b"one", b"two"]

    broken = _Proto(fail=True)
    send = _Send(broken)  # type: ignore[arg-type]
    assert not send.write_nowait(b"x")  # the client is gone
    assert not send.write_nowait(b"y") and broken.streams[0].sent == [b"x"]


class _Scope:
    proto = "http"
    http_version = "2"
    scheme = "http"
    query_string = ""

    def __init__(self, method: str, headers: dict[str, str]) -> None:
        self.method = method
        self.path = "/agent.v1.AgentService/Run"
        self.headers = headers


class _BodyProto(_Proto):
    """Records when the application (or the bridge) first asks for the request body."""

    def __init__(self) -> None:
        super().__init__()
        self.body_asked = 0

    def __aiter__(self) -> _BodyProto:
        self.body_asked += 1
        return self

    def __anext__(self) -> _Done:
        return _Done()

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        pass


async def test_the_bridge_never_asks_for_an_unauthenticated_body() -> None:
    asked_when_app_ran: list[int] = []

    async def app(scope: object, receive: object, send: object) -> None:
        asked_when_app_ran.append(proto.body_asked)

    def may_read(headers: Mapping[str, str]) -> bool:
        return headers.get("authorization") == "Bearer right"

    bridge = RsgiBridge(app, may_read_body=may_read)
    proto = _BodyProto()
    await bridge.__rsgi__(_Scope("POST", {"authorization": "Bearer wrong"}), proto)
    proto_ok = proto
    proto = _BodyProto()
    await bridge.__rsgi__(_Scope("POST", {"authorization": "Bearer right"}), proto)
    assert asked_when_app_ran == [0, 1]  # prefetched only with the right credentials
    assert proto_ok.body_asked == 0
