"""Design §17.1 as properties: determinism and append-only history over random input sequences.

The log (every committed message) only ever grows; the active history is always the view over
it, and grows too except when a rewind restores an earlier turn's view.

Two generators: a protocol-following simulator (streams that a real adapter would produce, with
duplicate and stale inputs, steering and cancels mixed in), and a chaos generator that feeds
arbitrary inputs in arbitrary order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cursor_byok.llm.canonical import encode_messages, messages_hash
from cursor_byok.llm.events import DoneEvent, ErrorEvent, ResponseEvent, without_partial
from cursor_byok.llm.faux import FauxResponse, script_events
from cursor_byok.llm.types import (
    AssistantMessage,
    Message,
    TextContent,
    ToolCall,
    ToolResultMessage,
)
from cursor_byok.loop import (
    AwaitClient,
    AwaitLLM,
    CallLLM,
    Cancel,
    Canceled,
    ContinueLLM,
    Failed,
    Input,
    LLMEvent,
    LostCause,
    Resume,
    Rewind,
    RuntimeState,
    Span,
    Start,
    Supersede,
    ToolLost,
    ToolOperation,
    ToolResult,
    Transition,
    TurnContext,
    UserMessage,
    WaitInput,
    transition,
)
from cursor_byok.loop import view as views
from tests.loop.loop_helpers import user

PROPERTY_SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12)
TOOL_NAMES = st.sampled_from(["Read", "LS", "Shell", "Grep", "Nope"])


@st.composite
def tool_calls(draw: st.DrawFn, call_number: int) -> list[ToolCall]:
    n = draw(st.integers(1, 3))
    out: list[ToolCall] = []
    for i in range(n):
        name = draw(TOOL_NAMES)
        # Some models reuse ids such as call_0 in every response.
        tid = draw(st.sampled_from([f"t{call_number}_{i}", f"call_{i}"]))
        if draw(st.integers(0, 5)) == 0:
            out.append(ToolCall(id=tid, name=name, raw_arguments='{"path": '))
        else:
            out.append(ToolCall(id=tid, name=name, arguments={"path": draw(TEXT)}))
    return out


@st.composite
def responses(draw: st.DrawFn, call_number: int) -> FauxResponse:
    kind = draw(
        st.sampled_from(
            [
                "text",
                "thinking",
                "tools",
                "tools",
                "tools",
                "tools",
                "length",
                "error",
                "abort",
                "lone",
            ]
        )
    )
    if kind == "text":
        return FauxResponse.text(draw(TEXT))
    if kind == "thinking":
        return FauxResponse.text(draw(TEXT), thinking=draw(TEXT))
    if kind == "length":
        return FauxResponse.text(draw(TEXT), stop_reason="length")
    if kind == "tools":
        text = draw(st.none() | TEXT)
        thinking = draw(st.none() | TEXT)
        return FauxResponse.tool_calls(draw(tool_calls(call_number)), text=text, thinking=thinking)
    if kind == "error":
        return FauxResponse.error(draw(TEXT) or "boom", text=draw(TEXT))
    if kind == "abort":
        return FauxResponse.error("aborted", reason="aborted", text=draw(TEXT))
    return FauxResponse.error("refused", started=False)


@dataclass
class Run:
    inputs: list[Input] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    ignorable: list[bool] = field(default_factory=list)  # inputs that must change nothing
    state: RuntimeState = field(default_factory=lambda: RuntimeState.new("p"))
    turn_ends: list[tuple[Span, ...]] = field(default_factory=list)  # closed views at idle

    def push(self, item: Input, *, ignored: bool = False) -> Transition:
        t = transition(self.state, item)
        self.inputs.append(item)
        self.transitions.append(t)
        self.ignorable.append(ignored)
        self.state = t.state
        return t


def _result(call: ToolCall, text: str, error: bool) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id, tool_name=call.name, content=(TextContent(text=text),), is_error=error
    )


def simulate(data: st.DataObject) -> Run:
    run = Run()
    ctx = TurnContext(max_llm_calls=data.draw(st.integers(1, 6), label="max_llm_calls"))
    run.push(Start(user_message=user("go"), context=ctx))
    call_number = 0
    for _ in range(data.draw(st.integers(6, 16), label="steps")):
        c = run.state.committed
        waiting = c.waiting
        if c.status == "WaitingLLM":
            assert isinstance(waiting, AwaitLLM)
            call_number += 1
            response = data.draw(responses(call_number))
            chunk = data.draw(st.integers(1, 6))
            events = script_events(response, chunk_size=chunk, call_number=call_number)
            for event in events:
                noise = data.draw(st.integers(0, 150))
                if noise == 0:
                    run.push(Cancel(reason="stop"))
                    break
                if noise == 1:
                    run.push(UserMessage(message=user("steer")))
                if noise in (2, 3, 4):
                    run.push(LLMEvent(call_id=waiting.call_id + "x", event=event), ignored=True)
                run.push(LLMEvent(call_id=waiting.call_id, event=event))
            else:
                if data.draw(st.booleans()):  # a duplicate of the terminal event
                    run.push(LLMEvent(call_id=waiting.call_id, event=events[-1]), ignored=True)
        elif c.status == "WaitingClient":
            assert isinstance(waiting, AwaitClient)
            current = waiting.calls[waiting.next]
            later = [
                call
                for call in waiting.calls[waiting.next + 1 :]
                if all(r.tool_call_id != call.id for r in waiting.early) and call.id != current.id
            ]
            answered = list(waiting.calls[: waiting.next])
            action = data.draw(
                st.sampled_from(["answer", "answer", "early", "noise", "user", "cancel"])
            )
            if action == "early" and later:
                call = data.draw(st.sampled_from(later))
                run.push(ToolResult(message=_result(call, "early", data.draw(st.booleans()))))
            elif action == "noise":
                stale = answered  # ids are unique within one message (validated at done)
                unknown = ToolCall(id="unknown", name="Read")
                target = data.draw(st.sampled_from([unknown, *stale]))
                if target.id not in {call.id for call in waiting.calls[waiting.next :]}:
                    run.push(ToolResult(message=_result(target, "stale", False)), ignored=True)
            elif action == "user":
                run.push(UserMessage(message=user("meanwhile")))
            elif action == "cancel":
                run.push(Cancel())
            else:
                run.push(ToolResult(message=_result(current, "done", data.draw(st.booleans()))))
        else:
            if data.draw(st.integers(0, 4)) > 0:
                if data.draw(st.booleans()):
                    run.push(UserMessage(message=user("again")))
                else:
                    run.push(
                        Start(user_message=user("new"), context=TurnContext(supplements=("s",)))
                    )
            else:
                run.push(
                    LLMEvent(
                        call_id="p:1:llm1",
                        event=DoneEvent(
                            reason="stop",
                            message=AssistantMessage(content=(), api="x", provider="x", model="x"),
                        ),
                    ),
                    ignored=True,
                )
    if run.state.committed.status in ("WaitingLLM", "WaitingClient"):
        run.push(Cancel())
    return run


def _assistants(messages: tuple[Message, ...]) -> int:
    return sum(isinstance(m, AssistantMessage) for m in messages)


def _comparable(t: Transition) -> tuple[object, ...]:
    return (t.state, tuple(without_partial(e) for e in t.emit), t.command)


def check_pairing(messages: tuple[Message, ...], open_tail: bool) -> None:
    """Each assistant message with tool calls is followed by exactly their results, in order."""
    i = 0
    while i < len(messages):
        m = messages[i]
        i += 1
        if isinstance(m, AssistantMessage) and m.tool_calls:
            ids = [c.id for c in m.tool_calls]
            got = [
                r.tool_call_id
                for r in messages[i : i + len(ids)]
                if isinstance(r, ToolResultMessage)
            ]
            if open_tail and i + len(got) == len(messages):
                assert got == ids[: len(got)]
            else:
                assert got == ids
            i += len(got)
        else:
            assert not isinstance(m, ToolResultMessage), "a tool result without its call"


def check_run(run: Run) -> None:
    state = RuntimeState.new("p")
    last_request: tuple[Message, ...] | None = None
    for item, t, ignored in zip(run.inputs, run.transitions, run.ignorable, strict=True):
        # Same state + input: identical state, emit order, command (and messages_hash in it).
        again = transition(state, item)
        assert again == t
        assert _comparable(again) == _comparable(t)
        old, new = state.committed.messages, t.state.committed.messages
        old_log, new_log = state.committed.log, t.state.committed.log
        # The log is append-only, checked on canonical bytes, and `appended` is its new tail.
        assert new_log[: len(old_log)] == old_log
        assert encode_messages(new_log).startswith(encode_messages(old_log))
        assert t.appended == new_log[len(old_log) :]
        # The active history is the view over the log.
        assert new == views.materialize(t.state.committed.view, new_log)
        assert views.problem(t.state.committed.view, len(new_log)) is None
        if isinstance(item, Rewind):
            assert t.appended == ()
            last_request = None  # a new epoch: requests extend each other again from here
        else:
            # Append-only, checked on canonical bytes.
            assert new[: len(old)] == old
            assert encode_messages(new).startswith(encode_messages(old))
        # Only a model's answer adds an assistant message, one at a time; a rewind restores an
        # earlier turn's view and may hold fewer (its appended tail is empty, checked above).
        added = _assistants(new) - _assistants(old)
        if isinstance(item, Rewind):
            assert t.ignored is not None or new == views.materialize(item.view, new_log)
        elif added:
            assert added == 1
            assert isinstance(item, LLMEvent) and isinstance(item.event, DoneEvent)
            assert any(m is item.event.message for m in new[len(old) :])
        if ignored:
            assert t.state is state and t.emit == () and t.command == WaitInput()
            assert t.ignored is not None
        if t.ignored is not None:  # an ignored input changes nothing, and says why
            assert t == Transition(state, (), WaitInput(), ignored=t.ignored)
        if isinstance(t.command, ContinueLLM):
            assert isinstance(item, LLMEvent) and t.emit == (item.event,)
            assert t.state.committed is state.committed
        if isinstance(t.command, Failed | Canceled):
            if t.state is state:
                # The run ends without touching the conversation: a resume that finds the turn
                # ended before, or taken over by another run, which goes on with it.
                assert isinstance(item, Resume | Cancel | Supersede)
            else:
                assert t.state.pending_response is None
                assert t.state.committed.waiting is None
        if isinstance(item, LLMEvent) and isinstance(item.event, ErrorEvent):
            assert new == old  # an error never appends
        if isinstance(t.command, CallLLM):
            request = t.command.request.messages
            assert request == new
            assert t.command.messages_hash == messages_hash(request)
            if last_request is not None:
                assert encode_messages(request).startswith(encode_messages(last_request))
                assert len(request) > len(last_request)
            last_request = request
        state = t.state
    check_pairing(state.committed.messages, state.committed.status == "WaitingClient")


@PROPERTY_SETTINGS
@given(st.data())
def test_protocol_runs_are_deterministic_and_append_only(data: st.DataObject) -> None:
    run = simulate(data)
    check_run(run)
    # Replaying the recorded inputs from scratch reproduces every transition.
    replay = Run()
    for item in run.inputs:
        replay.push(item)
    assert [_comparable(t) for t in replay.transitions] == [_comparable(t) for t in run.transitions]


@st.composite
def chaos_inputs(draw: st.DrawFn) -> list[tuple[str, object]]:
    """Abstract inputs; call ids and tool ids are resolved against the state when fed."""
    events: list[ResponseEvent] = []
    for n in range(draw(st.integers(1, 3))):
        events.extend(script_events(draw(responses(n + 1)), chunk_size=draw(st.integers(1, 4))))
    steps = st.one_of(
        st.tuples(st.just("event_current"), st.sampled_from(events)),
        st.tuples(st.just("event_stale"), st.sampled_from(events)),
        st.tuples(st.just("result"), st.integers(0, 3)),
        st.tuples(st.just("result_unknown"), st.none()),
        st.tuples(st.just("user"), st.none()),
        st.tuples(st.just("start"), st.none()),
        st.tuples(st.just("cancel"), st.none()),
        st.tuples(st.just("supersede"), st.none()),
        st.tuples(st.just("resume"), st.sampled_from(["none", "sent", "result", "other_turn"])),
        st.tuples(st.just("lost"), st.sampled_from(list(LostCause))),
        st.tuples(st.just("rewind"), st.integers(0, 5)),
        st.tuples(st.just("follow_up"), st.sampled_from(["ask", "agent", None])),
    )
    return draw(st.lists(steps, max_size=40))


@PROPERTY_SETTINGS
@given(chaos_inputs())
def test_any_input_sequence_only_extends_history(steps: list[tuple[str, object]]) -> None:
    run = Run()
    run.push(Start(user_message=user("go")))
    for kind, arg in steps:
        c = run.state.committed
        waiting = c.waiting
        if kind == "event_current":
            call_id = waiting.call_id if isinstance(waiting, AwaitLLM) else "p:1:llm1"
            run.push(LLMEvent(call_id=call_id, event=arg))  # type: ignore[arg-type]
        elif kind == "event_stale":
            run.push(LLMEvent(call_id="p:9:llm9", event=arg), ignored=True)  # type: ignore[arg-type]
        elif kind == "result":
            calls = waiting.calls if isinstance(waiting, AwaitClient) else ()
            assert isinstance(arg, int)
            call = calls[arg % len(calls)] if calls else ToolCall(id="none", name="Read")
            run.push(ToolResult(message=_result(call, "r", arg % 2 == 0)))
        elif kind == "result_unknown":
            run.push(
                ToolResult(message=_result(ToolCall(id="???", name="Read"), "r", False)),
                ignored=True,
            )
        elif kind == "user":
            run.push(UserMessage(message=user("u")))
        elif kind == "start":
            run.push(Start(user_message=user("s"), context=TurnContext(supplements=("x",))))
        elif kind == "cancel":
            run.push(Cancel())
        elif kind == "supersede":
            run.push(Supersede())
        elif kind == "resume":
            run.push(_resume_input(run.state, str(arg)))
        elif kind == "lost":
            op = waiting.operation_id if isinstance(waiting, AwaitClient) else "none"
            run.push(ToolLost(operation_id=op, cause=arg, waited_ms=1500))  # type: ignore[arg-type]
        elif kind == "rewind":
            assert isinstance(arg, int)
            if run.turn_ends:
                target = run.turn_ends[arg % len(run.turn_ends)]
                run.push(Rewind(view=target))
        else:
            mode = arg if isinstance(arg, str) else None
            run.push(UserMessage(message=user("f"), mode=mode))
        if run.state.committed.status in ("Final", "Failed", "Canceled"):
            c = run.state.committed
            run.turn_ends.append(views.closed(c.view, len(c.log)))
    check_run(run)


def _resume_input(state: RuntimeState, kind: str) -> Resume:
    c = state.committed
    waiting = c.waiting
    if kind == "other_turn":
        return Resume(turn_id="p:999")
    if not isinstance(waiting, AwaitClient) or kind == "none":
        return Resume(turn_id=c.turn_id)
    call = waiting.calls[waiting.next]
    if kind == "sent":
        return Resume(operation=ToolOperation(operation_id=waiting.operation_id, sent=True))
    answer = _result(call, "recorded", False)
    return Resume(operation=ToolOperation(waiting.operation_id, sent=True, result=answer))
