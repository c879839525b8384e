"""Whole conversations through the production runtime: tool loops, the prefix guarantee of
consecutive requests (design §17.2), an upstream that aborts, a second turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cursor_byok.llm.canonical import encode_messages, messages_hash
from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.runtime.harness import (
    Answer,
    Client,
    follow_up,
    open_server,
    read_ok,
    run_request,
)
from tests.runtime.test_run import log_of
from tests.runtime.test_run import stored as stored_state


def grep_ok(files: list[str]) -> Answer:
    def answer(request: a.ExecServerMessage) -> a.ExecClientMessage | None:
        if request.WhichOneof("message") != "grep_args":
            return None
        reply = a.ExecClientMessage(id=request.id, exec_id=request.exec_id)
        union = reply.grep_result.success.workspace_results["/work"]
        union.files.files.extend(files)
        return reply

    return answer


def ls_ok() -> Answer:
    def answer(request: a.ExecServerMessage) -> a.ExecClientMessage | None:
        if request.WhichOneof("message") != "ls_args":
            return None
        reply = a.ExecClientMessage(id=request.id, exec_id=request.exec_id)
        reply.ls_result.success.directory_tree_root.abs_path = "/work"
        return reply

    return answer


async def test_two_tool_calls_in_one_message_then_final(tmp_path: Path) -> None:
    script = [
        FauxResponse.tool_calls(
            [("Read", {"path": "a.py"}), ("Grep", {"pattern": "TODO"})], text="Let me look."
        ),
        FauxResponse.text("a.py has two TODOs."),
    ]
    server = await open_server(tmp_path / "db", script, chunk_size=100)
    client = Client("r1", answers=[read_ok("# TODO\n# TODO\n"), grep_ok(["a.py"])])
    client.say(run_request("c", "find todos"))
    server.start(client)
    assert await client.ended() is None
    log = await log_of(server, "c")
    assert [type(m) for m in log] == [
        UserMessage,
        AssistantMessage,
        ToolResultMessage,
        ToolResultMessage,
        AssistantMessage,
    ]
    first = log[1]
    assert isinstance(first, AssistantMessage)
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_1_0", "Read", {"path": "a.py"}),
        ("call_1_1", "Grep", {"pattern": "TODO"}),
    ]
    assert [r.tool_call_id for r in log[2:4]] == ["call_1_0", "call_1_1"]  # type: ignore[union-attr]
    assert log[4].text == "a.py has two TODOs."  # type: ignore[union-attr]
    for op in ("c:1:llm1:call_1_0", "c:1:llm1:call_1_1"):
        record = await server.store.get_client_operation(op)
        assert record is not None and record.status == "completed", op
    calls = sorted(c.call_id for c in await server.store.list_recent_llm_calls())
    assert calls == ["c:1:llm1", "c:1:llm2"]
    assert server.llm.requests[1].messages == tuple(log[:4])
    assert client.kinds().count("tool_call_started read_tool_call") == 1
    assert client.kinds().count("tool_call_started grep_tool_call") == 1


async def test_three_requests_of_a_tool_loop_are_strict_byte_prefixes(tmp_path: Path) -> None:
    """Design §17.2, with an error result, an invalid-argument call and steering in between."""
    script = [
        FauxResponse.tool_calls([("Read", {"path": "x"})], thinking="read first"),
        FauxResponse.tool_calls(
            [
                ToolCall(id="bad", name="Write", raw_arguments='{"path": "x", '),
                ("LS", {"path": "."}),
            ]
        ),
        FauxResponse.text("done"),
    ]
    server = await open_server(tmp_path / "db", script, chunk_size=100)

    def no_such_file(request: a.ExecServerMessage) -> a.ExecClientMessage | None:
        if request.WhichOneof("message") != "read_args":
            return None
        reply = a.ExecClientMessage(id=request.id, exec_id=request.exec_id)
        reply.read_result.file_not_found.path = "x"
        return reply

    client = Client("r1", answers=[no_such_file, ls_ok()])
    client.hold_execs = True
    client.say(run_request("c", "go"))
    server.start(client)
    await client.until(lambda: len(client.held) == 1, "the read")
    client.answer(client.held.pop())
    await client.until(lambda: len(client.held) == 1, "the ls")
    client.say(follow_up("use LS instead"))  # steering: joins before the next model call
    for _ in range(200):  # until the run has committed it to the queue
        _, state = await stored_state(server, "c")
        if state.queued:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0.01)
    assert state.queued == (UserMessage.of_text("use LS instead"),)  # type: ignore[attr-defined]
    client.answer(client.held.pop())
    assert await client.ended() is None
    requests = server.llm.requests
    assert len(requests) == 3
    m1, m2, m3 = (encode_messages(r.messages) for r in requests)
    assert m2.startswith(m1) and len(m2) > len(m1)
    assert m3.startswith(m2) and len(m3) > len(m2)
    # The stored call records carry the hashes of the messages each request sent.
    stored = {c.call_id: c for c in await server.store.list_recent_llm_calls()}
    assert [stored[f"c:1:llm{n}"].messages_hash for n in (1, 2, 3)] == [
        messages_hash(r.messages) for r in requests
    ]
    assert len({r.system_prompt for r in requests}) == 1
    assert requests[0].tools == requests[1].tools == requests[2].tools
    assert requests[2].messages[-1] == UserMessage.of_text("use LS instead")
    # The invalid call got the loop's own answer, and its card was completed all the same.
    assert "tool_call_completed edit_tool_call error" in client.kinds()


async def test_an_aborted_upstream_stream_cancels_the_turn(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["a long answer " * 20], chunk_size=2, delay=0.01)
    client = Client("r1")
    client.say(run_request("c", "talk"))
    server.start(client)
    await client.until(lambda: len(client.sent) >= 3, "deltas")
    await server.llm.streams[0].aclose()
    ending = await client.ended()
    assert ending is not None and ending.code == "canceled"
    assert [m.text for m in await log_of(server, "c")] == ["talk"]  # type: ignore[attr-defined]


async def test_a_second_turn_reuses_the_context_and_extends_the_history(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["one", "two"], chunk_size=100)
    for n, text in enumerate(["first", "second"], start=1):
        client = Client(f"r{n}")
        client.say(run_request("c", text))
        server.start(client)
        assert await client.ended() is None
    r1, r2 = server.llm.requests
    assert r1.system_prompt == r2.system_prompt and r1.tools == r2.tools
    assert encode_messages(r2.messages).startswith(encode_messages(r1.messages))
    assert [m.text for m in r2.messages] == ["first", "one", "second"]  # type: ignore[union-attr]
