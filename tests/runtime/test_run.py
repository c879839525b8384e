"""The production runtime (`Runner` / `Run`) driven in-process: a fake client channel, FauxLLM
and a real SQLite file. Each test asserts the exact sequence of messages the client gets and
what the store holds afterwards."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cursor_byok.llm import canonical
from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import AssistantMessage, ToolResultMessage, UserMessage
from cursor_byok.loop import Span
from cursor_byok.loop.catalogue import Mode, offered
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.runtime import records
from tests.runtime.harness import (
    Client,
    Server,
    cancel,
    follow_up,
    open_server,
    read_ok,
    run_request,
    shell_ok,
)

READ = FauxResponse.tool_calls([("Read", {"path": "a.py"})])


async def stored(server: Server, conversation_id: str) -> tuple[int, object]:
    record = await server.store.load(conversation_id)
    assert record is not None
    return record.version, records.decode_state(record.state, record.messages)


async def log_of(server: Server, conversation_id: str) -> list[object]:
    record = await server.store.load(conversation_id)
    assert record is not None
    return [canonical.decode_message(m) for m in record.messages]


# -- a text turn and a tool turn -------------------------------------------------------------


async def test_a_text_turn(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["Hello there"], chunk_size=5)
    client = Client("r1")
    client.say(run_request("c1", "hi"))
    server.start(client)
    assert await client.ended() is None
    assert client.kinds() == [
        "text 'Hello'",
        "text ' ther'",
        "text 'e'",
        "kv set_blob_args",  # the turn's checkpoint blob, sent before its last commit
        "turn_ended",
        "checkpoint 1",
    ]
    _, state = await stored(server, "c1")
    assert [type(m) for m in state.log] == [UserMessage, AssistantMessage]  # type: ignore[attr-defined]
    assert state.status == "Final"  # type: ignore[attr-defined]
    (summary,) = server.summaries
    assert (summary.outcome, summary.llm_calls, summary.conversation_id) == ("ok", 1, "c1")
    (call,) = await server.store.list_recent_llm_calls()
    assert call.status == "committed" and call.assistant_hash is not None


async def test_a_tool_turn(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", [READ, "Done"], chunk_size=50)
    client = Client("r1", answers=[read_ok("x = 1\n")])
    client.say(run_request("c1", "read a.py"))
    server.start(client)
    assert await client.ended() is None
    assert client.kinds() == [
        "partial_tool_call",  # the call's card appears while its arguments stream
        "partial_tool_call",
        "kv set_blob_args",  # the model call changed the history: a checkpoint at once
        "checkpoint 1",
        "tool_call_started read_tool_call",
        "exec read_args",
        "tool_call_completed read_tool_call success",
        "text 'Done'",
        "kv set_blob_args",
        "turn_ended",
        "checkpoint 1",
    ]
    log = await log_of(server, "c1")
    assert [type(m) for m in log] == [
        UserMessage,
        AssistantMessage,
        ToolResultMessage,
        AssistantMessage,
    ]
    assert "x = 1" in log[2].text  # type: ignore[attr-defined]
    # The second model call saw the first one's request, extended by what was appended.
    first, second = server.llm.calls
    assert second.request.messages[: len(first.request.messages)] == first.request.messages
    op = await server.store.get_client_operation("c1:1:llm1:" + log[1].tool_calls[0].id)  # type: ignore[attr-defined]
    assert op is not None and op.status == "completed"


# -- cancel ----------------------------------------------------------------------------------


async def test_cancel_mid_stream(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["a long answer " * 20], chunk_size=4, delay=0.02)
    client = Client("r1")
    client.say(run_request("c1"))
    server.start(client)
    await client.until(lambda: len(client.sent) >= 2, "two deltas")
    client.say(cancel("enough"))
    ending = await client.ended()
    assert ending is not None and (ending.code, ending.message) == ("canceled", "enough")
    kinds = client.kinds()
    assert kinds and all(k.startswith("text ") for k in kinds)  # nothing after the cancel
    _, state = await stored(server, "c1")
    assert state.status == "Canceled" and len(state.log) == 1  # type: ignore[attr-defined]
    (call,) = await server.store.list_recent_llm_calls()
    assert call.status == "canceled" and call.error == "canceled by the client (enough)"
    stream = server.llm.streams[0]
    await asyncio.sleep(0.05)
    assert stream._aborted  # the upstream stream was closed, not left running


async def test_cancel_mid_tool(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", [READ], chunk_size=50)
    client = Client("r1")
    client.hold_execs = True
    client.say(run_request("c1"))
    server.start(client)
    await client.until(lambda: bool(client.held), "the exec request")
    client.say(cancel("stop it"))
    ending = await client.ended()
    assert ending is not None and ending.code == "canceled"
    assert client.kinds() == [
        "partial_tool_call",
        "partial_tool_call",
        "kv set_blob_args",
        "checkpoint 1",
        "tool_call_started read_tool_call",
        "exec read_args",
        "tool_call_completed read_tool_call error",  # the loop's "canceled" result, on its card
        "exec abort",
    ]
    log = await log_of(server, "c1")
    assert isinstance(log[-1], ToolResultMessage) and log[-1].is_error
    assert log[-1].text == "canceled by the user"


# -- resume after a restart ------------------------------------------------------------------


async def test_resume_after_a_restart_mid_stream_resends_the_same_bytes(tmp_path: Path) -> None:
    db = tmp_path / "db"
    first = await open_server(db, ["never finished " * 30], chunk_size=3, delay=0.02)
    client = Client("r1")
    client.say(run_request("c1", "question"))
    first.start(client, transport="runsse")
    await client.until(lambda: len(client.sent) >= 2, "the stream")
    await first.crash()
    await first.store.close()

    second = await open_server(db, ["the answer"], chunk_size=50)
    again = Client("r1")  # the same request id, reopened: the run request comes from the store
    second.start(again, transport="runsse")
    assert await again.ended() is None
    assert again.kinds() == ["text 'the answer'", "kv set_blob_args", "turn_ended", "checkpoint 1"]
    assert second.llm.calls[0].prepared.body == first.llm.calls[0].prepared.body
    log = await log_of(second, "c1")
    assert [type(m) for m in log] == [UserMessage, AssistantMessage]


async def test_resume_of_a_read_sent_before_the_restart_sends_it_again(tmp_path: Path) -> None:
    db = tmp_path / "db"
    first = await open_server(db, [READ])
    client = Client("r1")
    client.hold_execs = True
    client.say(run_request("c1"))
    first.start(client, transport="runsse")
    await client.until(lambda: bool(client.held), "the exec")
    await first.crash()
    await first.store.close()

    second = await open_server(db, ["read it"], chunk_size=50)
    again = Client("r1", answers=[read_ok("content")])
    second.start(again, transport="runsse")
    assert await again.ended() is None
    assert again.kinds() == [
        "tool_call_started read_tool_call",  # no side effects: sent again
        "exec read_args",
        "tool_call_completed read_tool_call success",
        "text 'read it'",
        "kv set_blob_args",
        "turn_ended",
        "checkpoint 1",
    ]


async def test_resume_of_a_shell_sent_before_the_restart_is_never_run_twice(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db"
    shell = FauxResponse.tool_calls([("Shell", {"command": "rm -rf build"})])
    first = await open_server(db, [shell])
    client = Client("r1")
    client.hold_execs = True
    client.say(run_request("c1"))
    first.start(client, transport="runsse")
    await client.until(lambda: bool(client.held), "the exec")
    await first.crash()
    await first.store.close()

    second = await open_server(db, ["checked"], chunk_size=50)
    again = Client("r1", answers=[shell_ok("never")])
    second.start(again, transport="runsse")
    assert await again.ended() is None
    assert again.kinds() == [
        "tool_call_completed shell_tool_call failure",  # the unknown outcome, on its card
        "text 'checked'",
        "kv set_blob_args",
        "turn_ended",
        "checkpoint 1",
    ]
    log = await log_of(second, "c1")
    assert "outcome is unknown" in log[2].text  # type: ignore[attr-defined]
    op = await second.store.get_client_operation(
        "c1:1:llm1:" + log[1].tool_calls[0].id  # type: ignore[attr-defined]
    )
    assert op is not None and op.status == "completed"


# -- rewind -----------------------------------------------------------------------------------


async def test_a_rewind_restores_an_earlier_turn_and_keeps_every_message(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["one", "two", "three"], chunk_size=50)
    checkpoints: list[list[bytes]] = []
    blobs: dict[bytes, bytes] = {}
    for n, text in enumerate(["q1", "q2"], start=1):
        client = Client(f"r{n}")
        client.blobs = blobs
        client.say(run_request("c1", text, turns=checkpoints[-1] if checkpoints else None))
        server.start(client)
        assert await client.ended() is None
        checkpoints.append(list(client.sent[-1].conversation_checkpoint_update.turns))
    assert [len(c) for c in checkpoints] == [1, 2]

    client = Client("r3")  # the user went back to the end of turn one
    client.blobs = blobs
    client.say(run_request("c1", "q2 again", turns=checkpoints[0]))
    server.start(client)
    assert await client.ended() is None
    assert client.kinds() == ["text 'three'", "kv set_blob_args", "turn_ended", "checkpoint 2"]
    third = server.llm.calls[2].request.messages
    assert [m.text for m in third] == ["q1", "one", "q2 again"]  # type: ignore[union-attr]
    _, state = await stored(server, "c1")
    assert state.view == (Span(0, 2), Span(4))  # type: ignore[attr-defined]
    assert [m.text for m in state.log] == ["q1", "one", "q2", "two", "q2 again", "three"]  # type: ignore[attr-defined]
    assert client.sent[-1].conversation_checkpoint_update.turns[0] == checkpoints[0][0]


# -- a second run while busy, a lost race ------------------------------------------------------


async def test_a_second_run_supersedes_the_busy_one(tmp_path: Path) -> None:
    server = await open_server(
        tmp_path / "db", ["slow answer " * 40, "fresh answer"], chunk_size=4, delay=0.02
    )
    old = Client("r1")
    old.say(run_request("c1", "first"))
    server.start(old)
    await old.until(lambda: len(old.sent) >= 2, "the first stream")
    new = Client("r2")
    new.say(run_request("c1", "second"))
    server.start(new)
    ending = await old.ended()
    assert ending is not None and ending.code == "canceled"
    assert ending.message == "a newer request for this conversation arrived"
    assert all(k.startswith("text ") for k in old.kinds())
    assert await new.ended() is None
    assert new.text() == "fresh answer"
    log = await log_of(server, "c1")
    assert [m.text for m in log] == ["first", "second", "fresh answer"]  # type: ignore[attr-defined]


async def test_a_lost_race_with_another_process_ends_the_run_canceled(tmp_path: Path) -> None:
    db = tmp_path / "db"
    one = await open_server(db, ["slow " * 60], chunk_size=3, delay=0.03)
    two = await open_server(db, ["the other process answered"], chunk_size=50)
    runner_one = Client("r1")
    runner_one.say(run_request("c1", "first"))
    one.start(runner_one)
    await runner_one.until(lambda: len(runner_one.sent) >= 2, "the first stream")
    # Another server process on the same database takes the conversation over.
    other = Client("r2")
    other.say(run_request("c1", "second"))
    two.start(other)
    assert await other.ended() is None
    ending = await runner_one.ended()
    assert ending is not None and ending.code == "canceled"
    assert ending.message == "the conversation was continued by another request"
    log = await log_of(two, "c1")
    assert [m.text for m in log] == ["first", "second", "the other process answered"]  # type: ignore[attr-defined]


# -- follow-ups, interactions, unknown messages --------------------------------------------------


async def test_a_follow_up_brings_its_mode_to_the_next_model_call(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", [READ, "answered"], chunk_size=50)
    client = Client("r1", answers=[read_ok("x")])
    client.hold_execs = True
    client.say(run_request("c1", "look"))
    server.start(client)
    await client.until(lambda: bool(client.held), "the exec")
    client.say(follow_up("only look, change nothing", mode=a.AGENT_MODE_ASK))
    await asyncio.sleep(0.05)
    client.answer(client.held.pop())
    assert await client.ended() is None
    second = server.llm.calls[1].request
    assert "ask mode" in second.system_prompt
    assert "refuses every call that writes" in second.system_prompt
    assert [t.name for t in second.tools] == list(offered(Mode.ASK))
    assert second.messages[-1].text == "only look, change nothing"  # type: ignore[union-attr]


async def test_interaction_answers_reach_their_waiter(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", [READ, "ok"], chunk_size=50)
    client = Client("r1", answers=[read_ok("x")])
    client.hold_execs = True
    client.say(run_request("c1"))
    server.start(client)
    await client.until(lambda: bool(client.held), "the exec")
    (run,) = server.runner._active.values()

    def query(query_id: int) -> bytes:
        q = a.InteractionQuery(id=query_id)
        q.switch_mode_request_query.SetInParent()
        return a.AgentServerMessage(interaction_query=q).SerializeToString()

    asked = asyncio.ensure_future(run.requests.ask(query, "a mode switch"))
    await client.until(lambda: client.sent[-1].WhichOneof("message") == "interaction_query", "q")
    query_id = client.sent[-1].interaction_query.id
    stray = a.InteractionResponse(id=query_id + 100)  # nothing waits for this one
    stray.switch_mode_request_response.SetInParent()
    client.say(a.AgentClientMessage(interaction_response=stray))
    response = a.InteractionResponse(id=query_id)
    response.switch_mode_request_response.SetInParent()
    client.say(a.AgentClientMessage(interaction_response=response))
    answer = await asyncio.wait_for(asked, 2)
    assert (answer.id, answer.kind) == (query_id, "switch_mode_request_response")
    client.answer(client.held.pop())
    assert await client.ended() is None


async def test_unknown_client_events_are_counted(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", [READ, "ok"], chunk_size=50)
    client = Client("r1", answers=[read_ok("x")])
    client.hold_execs = True
    client.say(run_request("c1"))
    server.start(client)
    await client.until(lambda: bool(client.held), "the exec")
    summarize = a.AgentClientMessage()
    summarize.conversation_action.summarize_action.SetInParent()
    client.say(summarize)
    client.say(summarize)
    client.say(a.AgentClientMessage(prewarm_request=a.PrewarmRequest()))
    client.answer(client.held.pop())
    assert await client.ended() is None
    assert server.unknown == [
        "conversation_action.summarize_action",
        "conversation_action.summarize_action",
        "prewarm_request",
    ]


async def test_a_failure_applying_a_stream_event_ends_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug met while applying a model call's event (in the task reading the stream) ends the
    run with an internal error, as one in the run's own task does; the stream is not left
    hanging."""
    from cursor_byok.llm.events import TextDelta
    from cursor_byok.loop import LLMEvent
    from cursor_byok.transport.runtime import run as run_module

    real = run_module.transition

    def transition(state: object, input: object) -> object:
        if isinstance(input, LLMEvent) and isinstance(input.event, TextDelta):
            raise RuntimeError("a bug")
        return real(state, input)  # type: ignore[arg-type]

    monkeypatch.setattr(run_module, "transition", transition)
    server = await open_server(tmp_path / "db", ["Hello there"], chunk_size=5)
    client = Client("r1")
    client.say(run_request("c1", "hi"))
    server.start(client)
    ending = await client.ended()
    assert ending is not None and ending.message == "internal error: RuntimeError"
    (summary,) = server.summaries
    assert summary.outcome == "error"
