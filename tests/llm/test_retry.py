"""RetryingLLM: deterministic policy tests with a fake clock, sleep and random, then the real
adapter over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from cursor_byok.llm.assembler import MessageAssembler
from cursor_byok.llm.events import DoneEvent, ErrorEvent, ResponseEvent, StartEvent
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.retry import RetryingLLM, RetryingStream, RetryPolicy
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.stream import PreparedRequest, StreamEnded, deliver_by_task
from cursor_byok.llm.types import RequestMessages, UserMessage
from tests.support.upstream import Reply, fake_upstream, fixture_bytes

REQUEST = RequestMessages(system_prompt="s", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="m")


# -- a scripted inner LLM ----------------------------------------------------------------------


def _asm() -> MessageAssembler:
    return MessageAssembler(api="faux", provider="p", model="m")


def http_error(status: int, retry_after_ms: int | None = None) -> list[ResponseEvent]:
    return [_asm().fail(f"HTTP {status}", http_status=status, retry_after_ms=retry_after_ms)]


def transient() -> list[ResponseEvent]:
    return [_asm().fail("could not connect", transient=True)]


def ok(text: str = "hi") -> list[ResponseEvent]:
    asm = _asm()
    events: list[ResponseEvent] = [asm.start()]
    index, start = asm.open_text()
    events += [start, asm.text_delta(index, text), *asm.close_all(), asm.done("stop")]
    return events


def started_then_error(status: int | None = 503) -> list[ResponseEvent]:
    asm = _asm()
    return [asm.start(), asm.fail("overloaded mid-stream", http_status=status)]


class ScriptedStream:
    def __init__(self, events: list[ResponseEvent]) -> None:
        self.events = list(events)
        self.closed = False
        self.ended = False

    async def recv(self) -> ResponseEvent:
        if self.ended:
            raise StreamEnded("ended")
        if self.closed or not self.events:
            self.ended = True
            return _asm().fail("aborted", reason="aborted")
        event = self.events.pop(0)
        if isinstance(event, DoneEvent | ErrorEvent):
            self.ended = True
        return event

    def deliver(self, sink: Any) -> None:
        deliver_by_task(self, sink)

    async def aclose(self) -> None:
        self.closed = True


class ScriptedLLM:
    def __init__(self, *scripts: list[ResponseEvent]) -> None:
        self.scripts = list(scripts)
        self.sent: list[PreparedRequest] = []
        self.streams: list[ScriptedStream] = []

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        return PreparedRequest(url="http://x/chat", body=b'{"n":1}', model=settings.model)

    def send(self, prepared: PreparedRequest) -> ScriptedStream:
        self.sent.append(prepared)
        stream = ScriptedStream(self.scripts.pop(0))
        self.streams.append(stream)
        return stream

    def call(self, request: RequestMessages, settings: ModelSettings) -> ScriptedStream:
        return self.send(self.prepare(request, settings))


class FakeTime:
    """A clock that only moves when we sleep; records every sleep."""

    def __init__(self, *randoms: float) -> None:
        self.now = 0.0
        self.delays: list[float] = []
        self.randoms = list(randoms) or [0.5]

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        self.now += delay

    def clock(self) -> float:
        return self.now

    def random(self) -> float:
        return self.randoms.pop(0) if len(self.randoms) > 1 else self.randoms[0]


def wrap(inner: Any, policy: RetryPolicy | None = None, t: FakeTime | None = None) -> RetryingLLM:
    t = t or FakeTime()
    policy = policy or RetryPolicy()
    return RetryingLLM(inner, policy, sleep=t.sleep, random=t.random, clock=t.clock)


async def _received(stream: Any) -> list[ResponseEvent]:
    out: list[ResponseEvent] = []
    while True:
        event = await stream.recv()
        out.append(event)
        if isinstance(event, DoneEvent | ErrorEvent):
            return out


async def _delivered(stream: Any) -> list[ResponseEvent]:
    """The events a sink gets; exactly one terminal event, and nothing after it."""
    out: list[ResponseEvent] = []
    ended = asyncio.Event()

    async def sink(event: ResponseEvent) -> None:
        assert not ended.is_set(), f"an event after the terminal one: {event!r}"
        out.append(event)
        if isinstance(event, DoneEvent | ErrorEvent):
            ended.set()

    stream.deliver(sink)
    await asyncio.wait_for(ended.wait(), 10)
    await asyncio.sleep(0.01)  # anything after the terminal event would show up now
    return out


Collect = Callable[[Any], Awaitable[list[ResponseEvent]]]


@pytest.fixture(params=["recv", "deliver"])
def collect(request: pytest.FixtureRequest) -> Collect:
    """Each test reads its stream both ways: `recv`, and a sink given to `deliver`."""
    return _received if request.param == "recv" else _delivered


# -- policy ------------------------------------------------------------------------------------


async def test_retries_5xx_with_the_same_prepared_request_then_passes_events_through(
    collect: Collect,
) -> None:
    inner = ScriptedLLM(http_error(503), http_error(502), ok("hello"))
    t = FakeTime(0.5)
    llm = wrap(inner, t=t)
    stream = llm.call(REQUEST, SETTINGS)
    events = await collect(stream)
    assert isinstance(events[0], StartEvent) and isinstance(events[-1], DoneEvent)
    assert events[-1].message.text == "hello"
    assert stream.attempts == 3
    assert t.delays == [0.25, 0.5]  # full jitter: 0.5 * min(20, 0.5 * 2^n)
    assert stream.delays == t.delays
    assert inner.sent[0] is inner.sent[1] is inner.sent[2]
    with pytest.raises(StreamEnded):
        await stream.recv()


async def test_full_jitter_is_capped(collect: Collect) -> None:
    inner = ScriptedLLM(*(http_error(500) for _ in range(6)), ok())
    t = FakeTime(1.0)
    policy = RetryPolicy(max_attempts=7, max_delay_s=2.0, total_budget_s=1000)
    events = await collect(wrap(inner, policy, t).call(REQUEST, SETTINGS))
    assert isinstance(events[-1], DoneEvent)
    assert t.delays == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0]


async def test_decorrelated_jitter(collect: Collect) -> None:
    inner = ScriptedLLM(*(http_error(529) for _ in range(4)))
    t = FakeTime(0.5)
    policy = RetryPolicy(jitter="decorrelated", max_delay_s=2.0)
    stream = wrap(inner, policy, t).call(REQUEST, SETTINGS)
    events = await collect(stream)
    # uniform in [base, 3 * previous]: 0.5 + 0.5 * (1.5 - 0.5), then capped at 2
    assert t.delays == [1.0, 1.75, 2.0]
    assert stream.attempts == 4
    assert isinstance(events[-1], ErrorEvent) and events[-1].http_status == 529


@pytest.mark.parametrize("status", [400, 401, 404, 422, 501])
async def test_client_errors_are_not_retried(status: int, collect: Collect) -> None:
    inner = ScriptedLLM(http_error(status), ok())
    t = FakeTime()
    stream = wrap(inner, t=t).call(REQUEST, SETTINGS)
    events = await collect(stream)
    assert len(events) == 1 and isinstance(events[0], ErrorEvent)
    assert events[0].http_status == status
    assert stream.attempts == 1 and t.delays == [] and len(inner.sent) == 1


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 529])
async def test_retryable_statuses(status: int, collect: Collect) -> None:
    inner = ScriptedLLM(http_error(status), ok())
    stream = wrap(inner).call(REQUEST, SETTINGS)
    assert isinstance((await collect(stream))[-1], DoneEvent) and stream.attempts == 2


async def test_transient_connect_errors_are_retried(collect: Collect) -> None:
    inner = ScriptedLLM(transient(), transient(), ok())
    stream = wrap(inner).call(REQUEST, SETTINGS)
    assert isinstance((await collect(stream))[-1], DoneEvent) and stream.attempts == 3


async def test_retry_after_is_honored_as_the_delay(collect: Collect) -> None:
    inner = ScriptedLLM(http_error(429, retry_after_ms=1500), http_error(503, 0), ok())
    t = FakeTime(0.9)
    events = await collect(wrap(inner, t=t).call(REQUEST, SETTINGS))
    assert isinstance(events[-1], DoneEvent)
    assert t.delays == [1.5, 0.0]


async def test_retry_after_longer_than_the_limit_gives_up_at_once(collect: Collect) -> None:
    inner = ScriptedLLM(http_error(429, retry_after_ms=30_000), ok())
    t = FakeTime()
    stream = wrap(inner, t=t).call(REQUEST, SETTINGS)
    events = await collect(stream)
    assert isinstance(events[-1], ErrorEvent) and events[-1].retry_after_ms == 30_000
    assert t.delays == [] and stream.attempts == 1
    inner = ScriptedLLM(http_error(429, retry_after_ms=30_000), ok())
    policy = RetryPolicy(max_retry_after_s=40)
    assert isinstance((await collect(wrap(inner, policy).call(REQUEST, SETTINGS)))[-1], DoneEvent)


async def test_attempts_are_bounded_and_the_last_error_is_returned(collect: Collect) -> None:
    scripts = [http_error(503) for _ in range(5)]
    last = scripts[3][0]
    inner = ScriptedLLM(*scripts)
    t = FakeTime()
    stream = wrap(inner, t=t).call(REQUEST, SETTINGS)
    events = await collect(stream)
    assert events == [last]
    assert stream.attempts == 4 and len(t.delays) == 3 and len(inner.sent) == 4


async def test_total_time_is_bounded(collect: Collect) -> None:
    inner = ScriptedLLM(*(http_error(503) for _ in range(4)))
    t = FakeTime(1.0)
    policy = RetryPolicy(total_budget_s=1.2)
    stream = wrap(inner, policy, t).call(REQUEST, SETTINGS)
    events = await collect(stream)
    # 0.5 s fits, then 0.5 + 1.0 would pass 1.2 s: give up with the second error
    assert t.delays == [0.5] and stream.attempts == 2
    assert isinstance(events[-1], ErrorEvent) and events[-1].http_status == 503


async def test_nothing_is_retried_after_start(collect: Collect) -> None:
    inner = ScriptedLLM(started_then_error(503), ok())
    stream = wrap(inner).call(REQUEST, SETTINGS)
    events = await collect(stream)
    assert isinstance(events[0], StartEvent) and isinstance(events[-1], ErrorEvent)
    assert stream.attempts == 1 and len(inner.sent) == 1


async def test_aborted_is_not_retried(collect: Collect) -> None:
    inner = ScriptedLLM([_asm().fail("aborted", reason="aborted", http_status=503)], ok())
    stream = wrap(inner).call(REQUEST, SETTINGS)
    assert (await collect(stream))[-1].reason == "aborted"  # type: ignore[union-attr]
    assert stream.attempts == 1


async def test_aclose_during_backoff_aborts_at_once() -> None:
    inner = ScriptedLLM(http_error(503), ok())
    delays: list[float] = []

    async def forever(delay: float) -> None:
        delays.append(delay)
        await asyncio.Event().wait()

    llm = RetryingLLM(inner, sleep=forever, random=lambda: 0.5)
    stream = llm.call(REQUEST, SETTINGS)
    waiter = asyncio.create_task(stream.recv())
    for _ in range(100):
        if delays:
            break
        await asyncio.sleep(0.001)
    assert delays == [0.25]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await stream.aclose()
    event = await asyncio.wait_for(waiter, 1)
    assert loop.time() - t0 < 0.2
    assert isinstance(event, ErrorEvent) and event.reason == "aborted"
    assert event.message.stop_reason == "aborted" and event.http_status is None
    assert stream.attempts == 1 and len(inner.sent) == 1
    with pytest.raises(StreamEnded):
        await stream.recv()


async def test_the_first_attempt_starts_at_send_and_aclose_before_recv_closes_it() -> None:
    inner = ScriptedLLM(ok())
    stream = wrap(inner).call(REQUEST, SETTINGS)
    assert len(inner.streams) == 1 and stream.attempts == 1  # sent before any recv
    await stream.aclose()
    assert inner.streams[0].closed
    event = await stream.recv()
    assert isinstance(event, ErrorEvent) and event.reason == "aborted"
    assert event.message.model == "m"
    assert stream.attempts == 1 and len(inner.streams) == 1


async def test_aclose_mid_stream_closes_the_inner_stream() -> None:
    inner = ScriptedLLM(ok())
    stream = wrap(inner).call(REQUEST, SETTINGS)
    assert isinstance(await stream.recv(), StartEvent)
    await stream.aclose()
    assert inner.streams[0].closed
    event = await stream.recv()
    assert isinstance(event, ErrorEvent) and event.reason == "aborted"


def test_prepare_delegates() -> None:
    inner = ScriptedLLM(ok())
    llm = wrap(inner)
    assert llm.prepare(REQUEST, SETTINGS) == inner.prepare(REQUEST, SETTINGS)
    assert isinstance(llm.send(llm.prepare(REQUEST, SETTINGS)), RetryingStream)


# -- over loopback HTTP with the real adapter -----------------------------------------------------


def chat_adapter(base_url: str) -> OpenAIChatAdapter:
    return OpenAIChatAdapter(
        ProviderSettings(name="openai", api="openai-chat", base_url=base_url, api_key="sk-x-1234")
    )


async def test_http_503_then_200_resends_identical_bytes(collect: Collect) -> None:
    async with fake_upstream() as up:
        up.push(Reply.json(503, '{"error":{"message":"overloaded","type":"server_error"}}'))
        up.push(Reply.sse(fixture_bytes("openai-chat", "text-basic.sse")))
        a = chat_adapter(up.base_url)
        llm = RetryingLLM(a, RetryPolicy(base_delay_s=0.01))  # real asyncio.sleep
        stream = llm.call(REQUEST, SETTINGS)
        events = await collect(stream)
        assert sum(isinstance(e, DoneEvent | ErrorEvent) for e in events) == 1
        assert isinstance(events[0], StartEvent) and isinstance(events[-1], DoneEvent)
        assert stream.attempts == 2 and len(up.requests) == 2
        assert up.requests[0].body == up.requests[1].body
        assert up.requests[0].headers["authorization"] == up.requests[1].headers["authorization"]
        await a.aclose()


async def test_http_400_is_not_retried(collect: Collect) -> None:
    async with fake_upstream() as up:
        up.push(Reply.json(400, '{"error":{"message":"bad","type":"invalid_request_error"}}'))
        up.push(Reply.sse(fixture_bytes("openai-chat", "text-basic.sse")))
        a = chat_adapter(up.base_url)
        t = FakeTime()
        stream = wrap(a, t=t).call(REQUEST, SETTINGS)
        events = await collect(stream)
        assert len(events) == 1 and isinstance(events[0], ErrorEvent)
        assert events[0].http_status == 400 and len(up.requests) == 1 and t.delays == []
        await a.aclose()


async def test_http_429_retry_after_ms_is_honored(collect: Collect) -> None:
    async with fake_upstream() as up:
        up.push(Reply.json(429, '{"error":{"message":"slow down"}}', [("retry-after-ms", "1500")]))
        up.push(Reply.sse(fixture_bytes("openai-chat", "tool-call-single.sse")))
        a = chat_adapter(up.base_url)
        t = FakeTime(0.1)
        stream = wrap(a, t=t).call(REQUEST, SETTINGS)
        events = await collect(stream)
        assert isinstance(events[-1], DoneEvent) and events[-1].reason == "toolUse"
        assert t.delays == [1.5] and len(up.requests) == 2
        await a.aclose()


async def test_in_band_error_without_status_is_not_retried(collect: Collect) -> None:
    """An error event after the 200, before any content: a lone error (nothing was output),
    not retried since it gives no status and is not transient."""
    error_chunk = json.dumps({"error": {"code": 502, "message": "Provider returned error"}})
    async with fake_upstream() as up:
        up.push(Reply.events([error_chunk]))
        up.push(Reply.sse(fixture_bytes("openai-chat", "text-basic.sse")))
        a = chat_adapter(up.base_url)
        t = FakeTime()
        stream = wrap(a, t=t).call(REQUEST, SETTINGS)
        events = await collect(stream)
        assert len(events) == 1 and isinstance(events[0], ErrorEvent)
        assert "Provider returned error" in events[0].error_message
        assert len(up.requests) == 1 and stream.attempts == 1 and t.delays == []
        await a.aclose()


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never came true")


@pytest.mark.parametrize("when", ["decided", "sleeping"])
async def test_a_sink_gets_aborted_at_once_when_closed_around_a_backoff(when: str) -> None:
    """Closed right after the retry was decided (its backoff not begun) or during the sleep:
    the sink's terminal event is an abort, at once, and nothing is sent again."""
    inner = ScriptedLLM(http_error(503), ok())
    sleeps: list[float] = []

    async def forever(delay: float) -> None:
        sleeps.append(delay)
        await asyncio.Event().wait()

    stream = RetryingLLM(inner, sleep=forever, random=lambda: 0.5).call(REQUEST, SETTINGS)
    got: list[ResponseEvent] = []
    ended = asyncio.Event()

    async def sink(event: ResponseEvent) -> None:
        assert not ended.is_set()
        got.append(event)
        if isinstance(event, DoneEvent | ErrorEvent):
            ended.set()

    stream.deliver(sink)
    if when == "decided":
        await _until(lambda: bool(stream.delays))
        assert not sleeps
    else:
        await _until(lambda: bool(sleeps))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await stream.aclose()
    await asyncio.wait_for(ended.wait(), 1)
    assert loop.time() - t0 < 0.2
    (event,) = got
    assert isinstance(event, ErrorEvent) and event.reason == "aborted"
    assert stream.attempts == 1 and len(inner.sent) == 1


class PastTheEndStream(ScriptedStream):
    """A broken inner stream: its sink gets its events, then more after the terminal one."""

    def deliver(self, sink: Any) -> None:
        async def run() -> None:
            for event in self.events:
                await sink(event)

        self.task = asyncio.get_running_loop().create_task(run())


async def test_a_sink_gets_nothing_after_the_inner_terminal_event() -> None:
    events = ok("a")
    late = [*events, events[2], events[-1], started_then_error()[-1]]
    inner = ScriptedLLM()
    inner.send = lambda prepared: PastTheEndStream(late)  # type: ignore[method-assign]
    got = await _delivered(wrap(inner).call(REQUEST, SETTINGS))
    assert got == events
