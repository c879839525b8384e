"""The loop driven the way the runner drives it: recursive async `run` / `read_llm` over FauxLLM.

Also design §17.2: consecutive requests of a tool loop extend each other's messages byte-for-byte.
"""

from __future__ import annotations

import asyncio

from cursor_byok.llm.canonical import encode_messages, messages_hash
from cursor_byok.llm.events import DoneEvent, TextDelta, ToolCallStart
from cursor_byok.llm.faux import FauxLLM, FauxResponse
from cursor_byok.llm.types import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
)
from cursor_byok.llm.types import UserMessage as LLMUserMessage
from cursor_byok.loop import (
    CallClient,
    CallLLM,
    Canceled,
    Environment,
    Final,
    RuntimeState,
    Start,
    ToolResult,
    TurnContext,
    UserMessage,
    WaitInput,
)
from tests.loop.loop_helpers import Driver, echo_tool, result, start, user

CTX = TurnContext(
    rules=("Prefer small diffs.",),
    environment=Environment(os="linux", shell="bash", workspace_paths=("/repo",)),
    supplements=("<open_file>main.py</open_file>",),
)


async def test_text_turn_ends_final_with_the_expected_history() -> None:
    llm = FauxLLM([FauxResponse.text("Hi! How can I help?", thinking="greet")], chunk_size=4)
    driver = Driver(llm)
    t = await driver.run(RuntimeState.new("c"), start("hello", CTX))
    assert isinstance(t.command, Final)
    answer = t.command.message
    assert answer.text == "Hi! How can I help?"
    assert t.state.committed.messages == (
        LLMUserMessage(
            content=(TextContent(text="<open_file>main.py</open_file>"), TextContent(text="hello"))
        ),
        answer,
    )
    assert t.state.committed.status == "Final"
    deltas = [e.delta for e in driver.published if isinstance(e, TextDelta)]
    assert "".join(deltas) == "Hi! How can I help?" and len(deltas) == 5
    assert isinstance(driver.published[-1], DoneEvent)
    # The request the fake received is the one the loop built.
    assert len(llm.calls) == 1
    call = llm.calls[0]
    assert call.request.messages == t.state.committed.messages[:1]
    assert "Prefer small diffs." in call.request.system_prompt
    assert call.settings.model == "faux-model"


async def test_two_tool_calls_in_one_message_then_final() -> None:
    llm = FauxLLM(
        [
            FauxResponse.tool_calls(
                [("Read", {"path": "a.py"}), ("Grep", {"pattern": "TODO"})],
                text="Let me look.",
            ),
            FauxResponse.text("a.py has two TODOs."),
        ]
    )
    driver = Driver(llm)
    t = await driver.converse(RuntimeState.new("c"), start("find todos"))
    assert isinstance(t.command, Final)
    msgs = t.state.committed.messages
    assert [type(m).__name__ for m in msgs] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    first = msgs[1]
    assert isinstance(first, AssistantMessage)
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_1_0", "Read", {"path": "a.py"}),
        ("call_1_1", "Grep", {"pattern": "TODO"}),
    ]
    results = msgs[2:4]
    assert all(isinstance(r, ToolResultMessage) for r in results)
    assert [r.tool_call_id for r in results] == ["call_1_0", "call_1_1"]  # type: ignore[union-attr]
    assert msgs[4] == t.command.message and t.command.message.text == "a.py has two TODOs."
    client_calls = [c for c in driver.commands if isinstance(c, CallClient)]
    assert [c.operation_id for c in client_calls] == ["c:1:llm1:call_1_0", "c:1:llm1:call_1_1"]
    llm_calls = [c for c in driver.commands if isinstance(c, CallLLM)]
    assert [c.call_id for c in llm_calls] == ["c:1:llm1", "c:1:llm2"]
    assert llm.requests[1].messages == msgs[:4]
    assert sum(isinstance(e, ToolCallStart) for e in driver.published) == 2


async def test_three_requests_of_a_tool_loop_are_strict_byte_prefixes() -> None:
    """Design §17.2, with an error result, an invalid-argument call and steering in between."""
    llm = FauxLLM(
        [
            FauxResponse.tool_calls([("Read", {"path": "x"})], thinking="read first"),
            FauxResponse.tool_calls(
                [
                    ToolCall(id="bad", name="Write", raw_arguments='{"path": "x", '),
                    ("LS", {"path": "."}),
                ]
            ),
            FauxResponse.text("done"),
        ]
    )
    driver = Driver(llm)
    t = await driver.run(RuntimeState.new("c"), start("go", CTX))
    assert isinstance(t.command, WaitInput)
    t = await driver.run(
        t.state, ToolResult(message=result("call_1_0", "no such file", error=True))
    )
    assert isinstance(t.command, WaitInput)
    t = await driver.run(t.state, UserMessage(message=user("use LS instead")))
    call = driver.outbox.pop()
    t = await driver.run(t.state, ToolResult(message=echo_tool(call.tool_call)))
    assert isinstance(t.command, Final)
    requests = llm.requests
    assert len(requests) == 3
    m1, m2, m3 = (encode_messages(r.messages) for r in requests)
    assert m2.startswith(m1) and len(m2) > len(m1)
    assert m3.startswith(m2) and len(m3) > len(m2)
    # The exact bytes the fake was sent carry the same messages, and the hashes match them.
    hashes = [c.messages_hash for c in driver.commands if isinstance(c, CallLLM)]
    assert hashes == [messages_hash(r.messages) for r in requests]
    assert len({r.system_prompt for r in requests}) == 1
    assert requests[0].tools == requests[1].tools == requests[2].tools
    assert requests[2].messages[-1] == user("use LS instead")


async def test_aborting_the_stream_cancels_the_turn() -> None:
    llm = FauxLLM([FauxResponse.text("a long answer " * 20)], delay=0.001, chunk_size=2)
    driver = Driver(llm)

    async def abort_soon() -> None:
        while not llm.streams or len(driver.published) < 5:
            await asyncio.sleep(0.001)
        await llm.streams[0].aclose()

    task = asyncio.create_task(abort_soon())
    t = await driver.run(RuntimeState.new("c"), start("talk"))
    await task
    assert isinstance(t.command, Canceled)
    assert t.state.committed.messages == (user("talk"),)
    assert t.state.pending_response is None


async def test_second_turn_reuses_context_and_extends_history() -> None:
    llm = FauxLLM([FauxResponse.text("one"), FauxResponse.text("two")])
    driver = Driver(llm)
    t1 = await driver.run(RuntimeState.new("c"), Start(user_message=user("first"), context=CTX))
    t2 = await driver.run(t1.state, UserMessage(message=user("second")))
    assert isinstance(t2.command, Final)
    r1, r2 = llm.requests
    assert r1.system_prompt == r2.system_prompt and r1.tools == r2.tools
    assert encode_messages(r2.messages).startswith(encode_messages(r1.messages))
    assert t2.state.committed.messages[-2:] == (user("second"), t2.command.message)
