"""Unit tests of `transition`: one rule per test."""

from __future__ import annotations

import msgspec
import pytest

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.events import DoneEvent, ErrorEvent, StartEvent, TextDelta
from cursor_byok.llm.faux import FauxResponse, script_events
from cursor_byok.llm.types import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
)
from cursor_byok.llm.types import (
    UserMessage as LLMUserMessage,
)
from cursor_byok.loop import (
    AwaitClient,
    CallClient,
    CallClients,
    CallLLM,
    Cancel,
    Canceled,
    ContinueLLM,
    ConversationState,
    Environment,
    Failed,
    Final,
    Ignored,
    LLMEvent,
    PendingResponse,
    RuntimeState,
    Start,
    ToolResult,
    Transition,
    TurnContext,
    UserMessage,
    WaitInput,
    build_prompt,
    build_tools,
    side_effects,
    transition,
)
from cursor_byok.loop.catalogue import Mode, offered
from cursor_byok.loop.results import CANCELED_RESULT_TEXT
from cursor_byok.loop.transition import CallEnd, CallOutcome
from tests.loop.loop_helpers import assistant_messages, feed, result, start, stream, tool_call, user

CID = "conv"


def started(context: TurnContext | None = None, text: str = "hello") -> RuntimeState:
    t = transition(RuntimeState.new(CID), start(text, context))
    assert isinstance(t.command, CallLLM)
    return t.state


def at_tools(calls: list[ToolCall], context: TurnContext | None = None) -> RuntimeState:
    """A state waiting on the client for the first of `calls`."""
    ts, _ = stream(started(context), FauxResponse.tool_calls(calls))
    return ts[-1].state


# -- Start and new turns -----------------------------------------------------------------


def test_start_appends_one_user_message_and_calls_llm() -> None:
    ctx = TurnContext(supplements=("<selection>x = 1</selection>",))
    t = transition(RuntimeState.new(CID), start("explain", ctx))
    c = t.state.committed
    assert c.status == "WaitingLLM" and c.turn == 1 and c.turn_id == "conv:1"
    assert c.messages == (
        LLMUserMessage(
            content=(TextContent(text="<selection>x = 1</selection>"), TextContent(text="explain"))
        ),
    )
    assert c.context is not None and c.context.supplements == ()
    cmd = t.command
    assert isinstance(cmd, CallLLM)
    assert cmd.call_id == "conv:1:llm1"
    assert cmd.request.messages is c.messages
    assert cmd.messages_hash == messages_hash(c.messages)
    assert cmd.request.system_prompt == build_prompt(None, c)
    assert cmd.request.tools == build_tools(None, c)
    assert t.emit == ()


def test_start_without_supplements_appends_the_users_message_itself() -> None:
    msg = user("hi")
    t = transition(RuntimeState.new(CID), Start(user_message=msg))
    assert t.state.committed.messages[0] is msg


def test_text_turn_deltas_emitted_unchanged_and_one_message_appended() -> None:
    s0 = started()
    ts, events = stream(s0, FauxResponse.text("hello there, general", thinking="hmm"), chunk_size=2)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 10
    for t, e in zip(ts, events, strict=True):
        assert t.emit == (e,) and t.emit[0] is e
    for t in ts[:-1]:
        assert isinstance(t.command, ContinueLLM)
        assert t.state.committed is s0.committed  # nothing committed while streaming
        assert t.state.pending_response is not None
    last = ts[-1]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert last.command == Final(message=done.message)
    c = last.state.committed
    assert c.status == "Final" and last.state.pending_response is None
    assert c.messages == (*s0.committed.messages, done.message)
    assert c.messages[-1] is done.message


def test_length_stop_is_final() -> None:
    ts, events = stream(started(), FauxResponse.text("cut", stop_reason="length"))
    assert isinstance(ts[-1].command, Final)
    assert ts[-1].state.committed.messages[-1] is events[-1].message  # type: ignore[union-attr]


def test_duplicate_done_is_dropped() -> None:
    ts, events = stream(started(), FauxResponse.text("once"))
    s = ts[-1].state
    call_id = "conv:1:llm1"
    t = transition(s, LLMEvent(call_id=call_id, event=events[-1]))
    assert t == Transition(s, (), WaitInput(), ignored=Ignored.NOT_AWAITED)
    assert len(assistant_messages(t.state.committed.messages)) == 1


def test_stale_and_unknown_call_ids_change_nothing() -> None:
    s = started()
    for call_id in ("conv:1:llm0", "conv:1:llm2", "other:1:llm1", ""):
        t = transition(s, LLMEvent(call_id=call_id, event=StartEvent()))
        assert t == Transition(s, (), WaitInput(), ignored=Ignored.OTHER_CALL)


def test_llm_events_outside_waiting_llm_are_ignored() -> None:
    s = RuntimeState.new(CID)
    t = transition(s, LLMEvent(call_id="conv:0:llm1", event=StartEvent()))
    assert t == Transition(s, (), WaitInput(), ignored=Ignored.NOT_AWAITED)


def test_error_discards_pending_and_fails_without_appending() -> None:
    s0 = started()
    ts, events = stream(s0, FauxResponse.error("boom", text="partial answer"))
    err = events[-1]
    assert isinstance(err, ErrorEvent)
    last = ts[-1]
    assert last.command == Failed(message=err.message)
    assert last.emit == (err,)
    assert last.state.pending_response is None
    assert last.state.committed.messages == s0.committed.messages
    assert last.state.committed.status == "Failed"


def test_lone_error_without_start_fails() -> None:
    ts, _ = stream(started(), FauxResponse.error("refused", started=False))
    assert isinstance(ts[-1].command, Failed) and len(ts) == 1


def test_abort_cancels_without_appending() -> None:
    s0 = started()
    ts, _ = stream(s0, FauxResponse.error("aborted", reason="aborted", text="half"))
    assert ts[-1].command == Canceled(reason="aborted")
    assert ts[-1].state.committed.status == "Canceled"
    assert ts[-1].state.committed.messages == s0.committed.messages


def test_second_start_resets_the_pending_response() -> None:
    s0 = started()
    first = script_events(FauxResponse.text("abandoned attempt"))
    ts = feed(s0, [LLMEvent(call_id="conv:1:llm1", event=e) for e in first[:4]])
    assert ts[-1].state.pending_response is not None
    assert ts[-1].state.pending_response.deltas == 2
    ts2, events = stream(ts[-1].state, FauxResponse.text("retry"))
    assert ts2[0].state.pending_response == PendingResponse(call_id="conv:1:llm1", events=1)
    c = ts2[-1].state.committed
    assert assistant_messages(c.messages) == [events[-1].message]  # type: ignore[union-attr]


def test_invalid_done_fails_and_appends_nothing() -> None:
    s0 = started()
    calls = [tool_call("dup"), tool_call("dup")]
    ts, _ = stream(s0, FauxResponse.tool_calls(calls))
    last = ts[-1]
    assert isinstance(last.command, Failed)
    assert "used twice" in (last.command.message.error_message or "")
    assert isinstance(last.emit[0], ErrorEvent)
    assert last.state.committed.messages == s0.committed.messages


def test_done_whose_blocks_differ_from_the_stream_fails() -> None:
    s0 = started()
    events = script_events(FauxResponse.text("a"))
    wrong = DoneEvent(
        reason="stop",
        message=AssistantMessage(content=(), api="faux", provider="faux", model="m"),
    )
    ts = feed(s0, [LLMEvent(call_id="conv:1:llm1", event=e) for e in [*events[:-1], wrong]])
    assert isinstance(ts[-1].command, Failed)


# -- tool calls ----------------------------------------------------------------------------


def test_tool_use_sends_every_call_at_once_and_appends_the_results_in_order() -> None:
    s0 = started()
    calls = [tool_call("a"), tool_call("b", "LS", path=".")]
    ts, _ = stream(s0, FauxResponse.tool_calls(calls))
    # Both go to the client together, as Cursor sends them.
    assert ts[-1].command == CallClients(
        calls=(
            CallClient(
                operation_id="conv:1:llm1:a",
                tool_call=tool_call("a"),
                llm_call_id="conv:1:llm1",
                content_index=0,
            ),
            CallClient(
                operation_id="conv:1:llm1:b",
                tool_call=tool_call("b", "LS", path="."),
                llm_call_id="conv:1:llm1",
                content_index=1,
            ),
        )
    )
    s = ts[-1].state
    c = s.committed
    assert c.status == "WaitingClient"
    assert isinstance(c.waiting, AwaitClient)
    # The set of outstanding calls is the loop's state.
    assert c.waiting.outstanding == ("conv:1:llm1:a", "conv:1:llm1:b")
    t1 = transition(s, ToolResult(message=result("a")))
    assert t1.command == WaitInput()  # b is on the client already: nothing to send
    w1 = t1.state.committed.waiting
    assert isinstance(w1, AwaitClient) and w1.outstanding == ("conv:1:llm1:b",) and w1.next == 1
    t2 = transition(t1.state, ToolResult(message=result("b", name="LS")))
    assert isinstance(t2.command, CallLLM)
    assert t2.command.call_id == "conv:1:llm2"
    msgs = t2.state.committed.messages
    assert [type(m).__name__ for m in msgs] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "ToolResultMessage",
    ]
    assert [m.tool_call_id for m in msgs[2:]] == ["a", "b"]  # type: ignore[union-attr]
    assert t2.command.request.messages[: len(c.messages)] == c.messages


def test_first_call_command_and_operation_id() -> None:
    s0 = started()
    ts, _ = stream(s0, FauxResponse.tool_calls([tool_call("a")]))
    assert ts[-1].command == CallClient(
        operation_id="conv:1:llm1:a",
        tool_call=tool_call("a"),
        llm_call_id="conv:1:llm1",
        content_index=0,
    )


def test_results_are_matched_by_id_and_appended_in_call_order() -> None:
    s = at_tools([tool_call("a"), tool_call("b"), tool_call("c")])
    t_c = transition(s, ToolResult(message=result("c", "C")))
    assert t_c.command == WaitInput() and t_c.state.committed.messages == s.committed.messages
    assert t_c.ignored is None  # held until its turn: applied, not ignored
    t_b = transition(t_c.state, ToolResult(message=result("b", "B")))
    t_a = transition(t_b.state, ToolResult(message=result("a", "A")))
    assert isinstance(t_a.command, CallLLM)
    tail = t_a.state.committed.messages[-3:]
    assert [m.text for m in tail] == ["A", "B", "C"]


def test_unknown_and_answered_results_change_nothing() -> None:
    s = at_tools([tool_call("a"), tool_call("b")])
    t = transition(s, ToolResult(message=result("zzz")))
    assert t == Transition(s, (), WaitInput(), ignored=Ignored.UNKNOWN_TOOL_CALL)
    s1 = transition(s, ToolResult(message=result("a"))).state
    t = transition(s1, ToolResult(message=result("a", "again")))
    assert t == Transition(s1, (), WaitInput(), ignored=Ignored.ALREADY_ANSWERED)
    early = transition(s1, ToolResult(message=result("zzz")))
    assert early == Transition(s1, (), WaitInput(), ignored=Ignored.UNKNOWN_TOOL_CALL)


def test_duplicate_early_result_is_ignored() -> None:
    s = at_tools([tool_call("a"), tool_call("b")])
    s1 = transition(s, ToolResult(message=result("b", "first"))).state
    t = transition(s1, ToolResult(message=result("b", "second")))
    assert t == Transition(s1, (), WaitInput(), ignored=Ignored.ALREADY_ANSWERED)
    done = transition(s1, ToolResult(message=result("a")))
    assert done.state.committed.messages[-1].text == "first"


def test_tool_results_outside_waiting_client_are_ignored() -> None:
    s = started()
    t = transition(s, ToolResult(message=result("a")))
    assert t == Transition(s, (), WaitInput(), ignored=Ignored.NOT_AWAITED)


def test_error_result_goes_back_to_the_model() -> None:
    s = at_tools([tool_call("a")])
    t = transition(s, ToolResult(message=result("a", "no such file", error=True)))
    assert isinstance(t.command, CallLLM)
    last = t.command.request.messages[-1]
    assert isinstance(last, ToolResultMessage) and last.is_error


def test_result_tool_name_follows_the_call() -> None:
    s = at_tools([tool_call("a")])
    t = transition(s, ToolResult(message=result("a", name="Other")))
    assert t.state.committed.messages[-1].tool_name == "Read"  # type: ignore[union-attr]


def test_invalid_arguments_and_unknown_tools_are_answered_by_the_loop() -> None:
    bad = ToolCall(id="x", name="Read", raw_arguments='{"path": ')
    calls = [bad, tool_call("y", "Teleport"), tool_call("z")]
    ts, _ = stream(started(), FauxResponse.tool_calls(calls))
    last = ts[-1]
    assert isinstance(last.command, CallClient) and last.command.tool_call.id == "z"
    x_result, y_result = last.state.committed.messages[-2:]
    assert isinstance(x_result, ToolResultMessage) and x_result.is_error
    assert "not valid JSON" in x_result.text and '{"path": ' in x_result.text
    assert isinstance(y_result, ToolResultMessage) and y_result.is_error
    assert "unknown tool 'Teleport'" in y_result.text


def test_all_calls_answered_by_the_loop_go_straight_back_to_the_model() -> None:
    ts, _ = stream(started(), FauxResponse.tool_calls([tool_call("y", "Teleport")]))
    assert isinstance(ts[-1].command, CallLLM)
    assert isinstance(ts[-1].emit[0], DoneEvent)


def test_stop_with_tool_calls_is_tool_use_and_tool_use_without_calls_is_final() -> None:
    ts, _ = stream(started(), FauxResponse.tool_calls([tool_call("a")], stop_reason="stop"))
    assert isinstance(ts[-1].command, CallClient)
    ts, _ = stream(started(), FauxResponse.text("no calls", stop_reason="toolUse"))
    assert isinstance(ts[-1].command, Final)


def test_max_llm_calls_fails_the_turn() -> None:
    s = at_tools([tool_call("a")], TurnContext(max_llm_calls=1))
    t = transition(s, ToolResult(message=result("a")))
    assert isinstance(t.command, Failed)
    assert "max_llm_calls" in (t.command.message.error_message or "")
    assert t.state.committed.status == "Failed"
    assert isinstance(t.state.committed.messages[-1], ToolResultMessage)


# -- steering ------------------------------------------------------------------------------


def test_user_message_while_streaming_steers_after_stop() -> None:
    s0 = started()
    events = script_events(FauxResponse.text("answer"))
    ts = feed(s0, [LLMEvent(call_id="conv:1:llm1", event=e) for e in events[:3]])
    q = transition(ts[-1].state, UserMessage(message=user("also this")))
    assert q.command == WaitInput() and q.emit == ()
    assert q.state.pending_response == ts[-1].state.pending_response
    assert q.state.committed.queued == (user("also this"),)
    assert q.state.committed.messages == s0.committed.messages
    rest = feed(q.state, [LLMEvent(call_id="conv:1:llm1", event=e) for e in events[3:]])
    last = rest[-1]
    assert isinstance(last.command, CallLLM) and last.command.call_id == "conv:1:llm2"
    msgs = last.state.committed.messages
    assert msgs[-2] is events[-1].message  # type: ignore[union-attr]
    assert msgs[-1] == user("also this")
    assert last.state.committed.queued == ()


def test_user_message_while_waiting_client_goes_after_the_results() -> None:
    s = at_tools([tool_call("a")])
    q = transition(s, UserMessage(message=user("stop using Read")))
    t = transition(q.state, ToolResult(message=result("a")))
    assert isinstance(t.command, CallLLM)
    msgs = t.command.request.messages
    assert isinstance(msgs[-2], ToolResultMessage) and msgs[-1] == user("stop using Read")


def test_start_while_busy_supersedes_the_busy_turn_and_begins_its_own() -> None:
    """A run request while a turn is in flight comes from a newer run: the busy turn (of a run
    that is gone) is closed and the new turn starts from the committed state, in one commit."""
    s = started()
    ctx = TurnContext(supplements=("ctx",), rules=("new rule",))
    t = transition(s, start("more", ctx))
    c = t.state.committed
    assert c.turn == 2 and c.turn_id == "conv:2" and c.status == "WaitingLLM"
    assert c.queued == ()
    assert c.messages == (
        *s.committed.messages,
        LLMUserMessage(content=(TextContent(text="ctx"), TextContent(text="more"))),
    )
    assert c.context is not None and c.context.rules == ("new rule",)
    assert isinstance(t.command, CallLLM) and t.command.call_id == "conv:2:llm1"
    assert t.call_end == CallEnd(
        "conv:1:llm1", CallOutcome.CANCELED, "superseded by a newer request"
    )
    assert t.appended == c.messages[-1:]


def test_start_while_waiting_on_the_client_closes_the_open_calls_first() -> None:
    s = at_tools([tool_call("a"), tool_call("b")])
    t = transition(s, start("new question"))
    c = t.state.committed
    closing = [m for m in c.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.text, m.is_error) for m in closing] == [
        ("a", CANCELED_RESULT_TEXT, True),
        ("b", CANCELED_RESULT_TEXT, True),
    ]
    assert isinstance(t.command, CallLLM) and c.turn == 2
    # The cards of the closed calls belonged to the other run's stream: none are asked for.
    assert t.local_results == ()
    assert [type(m).__name__ for m in t.appended] == [
        "ToolResultMessage",
        "ToolResultMessage",
        "UserMessage",
    ]


def test_user_message_after_final_starts_a_turn_with_the_stored_context() -> None:
    ctx = TurnContext(rules=("be terse",), environment=Environment(os="linux"))
    s0 = started(ctx)
    first_prompt = transition(RuntimeState.new(CID), start("hello", ctx)).command
    ts, _ = stream(s0, FauxResponse.text("done"))
    t = transition(ts[-1].state, UserMessage(message=user("next")))
    assert isinstance(t.command, CallLLM) and isinstance(first_prompt, CallLLM)
    assert t.command.call_id == "conv:2:llm1"
    assert t.state.committed.turn_id == "conv:2" and t.state.committed.llm_calls == 1
    assert t.command.request.system_prompt == first_prompt.request.system_prompt
    assert t.command.request.tools == first_prompt.request.tools


# -- cancel --------------------------------------------------------------------------------


def test_cancel_while_streaming_discards_pending() -> None:
    s0 = started()
    events = script_events(FauxResponse.text("some words"))
    ts = feed(s0, [LLMEvent(call_id="conv:1:llm1", event=e) for e in events[:4]])
    t = transition(ts[-1].state, Cancel(reason="user pressed stop"))
    assert t.command == Canceled(reason="user pressed stop")
    assert t.state.pending_response is None
    assert t.state.committed.messages == s0.committed.messages
    assert t.state.committed.status == "Canceled"
    late = transition(t.state, LLMEvent(call_id="conv:1:llm1", event=events[-1]))
    assert late.state is t.state


def test_cancel_while_waiting_client_closes_every_open_call() -> None:
    s = at_tools([tool_call("a"), tool_call("b"), tool_call("c")])
    s1 = transition(s, ToolResult(message=result("a", "A"))).state
    s2 = transition(s1, ToolResult(message=result("c", "C early"))).state
    t = transition(s2, Cancel())
    tail = t.state.committed.messages[-3:]
    assert [(m.tool_call_id, m.text, m.is_error) for m in tail] == [  # type: ignore[union-attr]
        ("a", "A", False),
        ("b", CANCELED_RESULT_TEXT, True),
        ("c", "C early", False),
    ]
    assert t.state.committed.waiting is None and t.command == Canceled(
        reason="canceled by the user"
    )


@pytest.mark.parametrize("finish", ["ready", "final", "failed"])
def test_cancel_when_idle_appends_nothing(finish: str) -> None:
    if finish == "ready":
        s = RuntimeState.new(CID)
    elif finish == "final":
        s = stream(started(), FauxResponse.text("x"))[0][-1].state
    else:
        s = stream(started(), FauxResponse.error("x"))[0][-1].state
    t = transition(s, Cancel(reason="r"))
    assert t.state.committed.status == "Canceled"
    assert t.state.committed.messages == s.committed.messages
    again = transition(t.state, Cancel(reason="r"))
    assert again.state is t.state and again.command == Canceled(reason="r")


# -- ids, state values ---------------------------------------------------------------------


def test_commit_id_changes_on_every_committed_change_only() -> None:
    s = RuntimeState.new(CID)
    seen = {s.committed.last_commit_id}
    t = transition(s, start())
    seen.add(t.state.committed.last_commit_id)
    ts, _ = stream(t.state, FauxResponse.tool_calls([tool_call("a")]))
    for x in ts[:-1]:
        assert x.state.committed.last_commit_id == t.state.committed.last_commit_id
    seen.add(ts[-1].state.committed.last_commit_id)
    t2 = transition(ts[-1].state, ToolResult(message=result("a")))
    seen.add(t2.state.committed.last_commit_id)
    assert len(seen) == 4
    assert t2.state.committed.last_commit_id == "conv@3"


def test_conversation_state_round_trips_through_json() -> None:
    s = at_tools([tool_call("a"), tool_call("b")], TurnContext(rules=("r",), mode="ask"))
    s = transition(s, ToolResult(message=result("b"))).state
    data = msgspec.json.encode(s.committed)
    back = msgspec.json.decode(data, type=ConversationState)
    assert back == s.committed
    assert transition(RuntimeState.of(back), ToolResult(message=result("a"))) == transition(
        RuntimeState.of(s.committed), ToolResult(message=result("a"))
    )


def test_empty_state() -> None:
    c = ConversationState.new("x")
    assert (c.conversation_id, c.turn_id, c.messages, c.waiting, c.status) == (
        "x",
        "x:0",
        (),
        None,
        "Ready",
    )
    assert RuntimeState.new("x") == RuntimeState(committed=c, pending_response=None)


# -- prompt and tools ----------------------------------------------------------------------

MCP = (
    ToolDefinition(name="zeta", description="z", parameters={"type": "object"}),
    ToolDefinition(name="alpha", description="a", parameters={"type": "object"}),
    ToolDefinition(name="Read", description="clash", parameters={"type": "object"}),
)


def test_tools_native_first_then_mcp_sorted() -> None:
    c = started(TurnContext(mcp_tools=MCP)).committed
    names = [t.name for t in build_tools(None, c)]
    assert names == [
        "Shell",
        "Read",
        "Write",
        "StrReplace",
        "Delete",
        "LS",
        "Grep",
        "Glob",
        "AwaitShell",
        "EditNotebook",
        "ReadLints",
        "TodoWrite",
        "AskQuestion",
        "SwitchMode",
        "Task",
        "alpha",
        "zeta",
    ]
    assert names == [*offered(Mode.AGENT), "alpha", "zeta"]
    read = build_tools(None, c)[1]
    assert read.parameters["required"] == ["path"]
    assert set(read.parameters["properties"]) == {"path", "offset", "limit"}


@pytest.mark.parametrize("mode", ["ask", "plan"])
def test_read_only_modes_offer_the_mode_table_and_mcp_tools(mode: str) -> None:
    ctx = TurnContext(mcp_tools=MCP, mode=mode)
    s = started(ctx)
    expected = [*offered(Mode(mode)), "alpha", "zeta"]
    assert [t.name for t in build_tools(None, s.committed)] == expected
    assert f"{mode} mode" in build_prompt(None, s.committed)


def test_prompt_has_environment_rules_and_is_deterministic() -> None:
    ctx = TurnContext(
        rules=("Use tabs.", "Write tests."),
        environment=Environment(os="linux", shell="bash", workspace_paths=("/w",), cwd="/w"),
        git="branch main, clean",
        custom_instructions="Answer in French.",
    )
    c = started(ctx).committed
    p = build_prompt(None, c)
    for piece in ("Use tabs.", "Write tests.", "linux", "bash", "/w", "branch main", "French"):
        assert piece in p
    assert p.index("Use tabs.") < p.index("Write tests.")
    messages = c.messages
    assert build_prompt(None, c) == p and c.messages is messages


def test_side_effects() -> None:
    for name in ("Shell", "Write", "StrReplace", "Delete", "EditNotebook"):
        assert side_effects(name)
    for name in ("Read", "LS", "Grep", "Glob", "ReadLints"):
        assert not side_effects(name)
    assert side_effects("mcp_tool")  # every MCP tool may change something
    assert side_effects("whatever")
