"""FauxLLM: scripted responses become well-formed native event streams."""

from __future__ import annotations

import asyncio

import pytest

from cursor_byok.llm.canonical import encode_request
from cursor_byok.llm.events import (
    DoneEvent,
    ErrorEvent,
    ResponseEvent,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    without_partial,
)
from cursor_byok.llm.faux import FauxLLM, FauxResponse, FauxStream, script_events
from cursor_byok.llm.settings import ModelSettings
from cursor_byok.llm.stream import LLM, StreamEnded
from cursor_byok.llm.types import (
    AssistantMessage,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    UserMessage,
)

REQUEST = RequestMessages(system_prompt="sys", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="m1", temperature=0.5)


async def drain(stream: FauxStream) -> list[ResponseEvent]:
    out: list[ResponseEvent] = []
    while True:
        event = await stream.recv()
        out.append(event)
        if isinstance(event, DoneEvent | ErrorEvent):
            return out


def test_is_an_llm() -> None:
    llm: LLM = FauxLLM()
    assert llm.prepare(REQUEST, SETTINGS).body == encode_request(REQUEST)


async def test_text_is_chunked_into_deltas_with_indices_and_partial() -> None:
    llm = FauxLLM([FauxResponse.text("hello world", thinking="hm")], chunk_size=4)
    events = await drain(llm.call(REQUEST, SETTINGS))
    kinds = [type(e) for e in events]
    assert kinds == [
        StartEvent,
        ThinkingStart,
        ThinkingDelta,
        ThinkingEnd,
        TextStart,
        TextDelta,
        TextDelta,
        TextDelta,
        TextEnd,
        DoneEvent,
    ]
    assert [e.delta for e in events if isinstance(e, TextDelta)] == ["hell", "o wo", "rld"]
    assert all(e.content_index == 1 for e in events if isinstance(e, TextDelta | TextStart))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stop"
    assert done.message.content == (ThinkingContent(thinking="hm"), TextContent(text="hello world"))
    assert (done.message.api, done.message.provider, done.message.model) == ("faux", "faux", "m1")
    delta = events[5]
    assert isinstance(delta, TextDelta)
    partial = delta.partial
    assert partial is not None and partial.snapshot().text == "hello world"


async def test_tool_calls_stream_arguments_and_end_in_tool_use() -> None:
    llm = FauxLLM(
        [
            FauxResponse.tool_calls(
                [("Read", {"path": "a"}), ToolCall(id="mine", name="LS", arguments={"path": "."})]
            )
        ]
    )
    events = await drain(llm.call(REQUEST, SETTINGS))
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.id, s.name, s.content_index) for s in starts] == [
        ("call_1_0", "Read", 0),
        ("mine", "LS", 1),
    ]
    args = "".join(e.delta for e in events if isinstance(e, ToolCallDelta) and e.content_index == 0)
    assert args == '{"path":"a"}'
    ends = [e.tool_call for e in events if isinstance(e, ToolCallEnd)]
    assert ends[0] == ToolCall(id="call_1_0", name="Read", arguments={"path": "a"})
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "toolUse"
    assert done.message.tool_calls == tuple(ends)


async def test_raw_invalid_arguments_give_arguments_error() -> None:
    llm = FauxLLM([FauxResponse.tool_calls([ToolCall(id="x", name="Read", raw_arguments="{oops")])])
    events = await drain(llm.call(REQUEST, SETTINGS))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    call = done.message.tool_calls[0]
    assert call.arguments_error is not None and call.raw_arguments == "{oops"


async def test_error_after_start_and_lone_error() -> None:
    llm = FauxLLM(
        [
            FauxResponse.error("boom", text="par"),
            FauxResponse.error("denied", started=False, http_status=401),
        ]
    )
    first = await drain(llm.call(REQUEST, SETTINGS))
    assert isinstance(first[0], StartEvent)
    err = first[-1]
    assert isinstance(err, ErrorEvent) and err.reason == "error" and err.error_message == "boom"
    assert err.message.stop_reason == "error"
    second = await drain(llm.call(REQUEST, SETTINGS))
    assert len(second) == 1
    lone = second[0]
    assert isinstance(lone, ErrorEvent) and lone.http_status == 401


async def test_running_out_of_script_is_a_clear_error() -> None:
    llm = FauxLLM()
    events = await drain(llm.call(REQUEST, SETTINGS))
    assert len(events) == 1 and isinstance(events[0], ErrorEvent)
    assert "no scripted response left for call #1" in events[0].error_message


async def test_recv_after_the_end_raises() -> None:
    stream = FauxLLM([FauxResponse.text("x")]).call(REQUEST, SETTINGS)
    await drain(stream)
    with pytest.raises(StreamEnded):
        await stream.recv()


async def test_aclose_mid_stream_yields_aborted() -> None:
    stream = FauxLLM([FauxResponse.text("abcdefgh")], chunk_size=1).call(REQUEST, SETTINGS)
    for _ in range(4):
        await stream.recv()
    await stream.aclose()
    event = await stream.recv()
    assert isinstance(event, ErrorEvent) and event.reason == "aborted"
    assert event.message.stop_reason == "aborted"
    with pytest.raises(StreamEnded):
        await stream.recv()


async def test_aclose_interrupts_a_delayed_recv() -> None:
    stream = FauxLLM([FauxResponse.text("abc")], delay=10.0).call(REQUEST, SETTINGS)
    pending = asyncio.create_task(stream.recv())
    await asyncio.sleep(0.01)
    await stream.aclose()
    event = await asyncio.wait_for(pending, 1.0)
    assert isinstance(event, ErrorEvent) and event.reason == "aborted"


async def test_aclose_before_start_and_after_end() -> None:
    stream = FauxLLM([FauxResponse.text("abc")]).call(REQUEST, SETTINGS)
    await stream.aclose()
    event = await stream.recv()
    assert isinstance(event, ErrorEvent) and event.reason == "aborted"
    done_stream = FauxLLM([FauxResponse.text("abc")]).call(REQUEST, SETTINGS)
    events = await drain(done_stream)
    await done_stream.aclose()
    assert isinstance(events[-1], DoneEvent)


async def test_records_requests_settings_and_prepared_bytes() -> None:
    llm = FauxLLM(
        [FauxResponse.text("a"), lambda request: FauxResponse.text(request.system_prompt)]
    )
    prepared = llm.prepare(REQUEST, SETTINGS)
    assert prepared.body == encode_request(REQUEST) and prepared.model == "m1"
    await drain(llm.send(prepared))
    other = RequestMessages(system_prompt="echo me", messages=REQUEST.messages)
    events = await drain(llm.call(other, SETTINGS))
    assert [c.request for c in llm.calls] == [REQUEST, other]
    assert llm.requests == [REQUEST, other]
    assert all(c.settings == SETTINGS for c in llm.calls)
    assert llm.calls[0].prepared == prepared
    assert llm.calls[1].prepared.body == encode_request(other)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.message.text == "echo me"
    assert llm.remaining == 0


async def test_raw_events_replayed_as_given_and_unterminated_is_an_error() -> None:
    raw = script_events(FauxResponse.text("hi"))
    llm = FauxLLM([FauxResponse.raw(raw), FauxResponse.raw(raw[:3])])
    events = await drain(llm.call(REQUEST, SETTINGS))
    assert events == raw
    short = await drain(llm.call(REQUEST, SETTINGS))
    assert [without_partial(e) for e in short[:3]] == [without_partial(e) for e in raw[:3]]
    assert isinstance(short[-1], ErrorEvent)
    assert "without a terminal event" in short[-1].error_message


async def test_message_replay_and_length() -> None:
    original = AssistantMessage(
        content=(TextContent(text="cut off"),),
        api="x",
        provider="y",
        model="z",
        stop_reason="length",
    )
    events = await drain(FauxLLM([FauxResponse.message(original)]).call(REQUEST, SETTINGS))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "length"
    assert done.message.content == original.content


def test_chunk_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FauxLLM(chunk_size=0)
