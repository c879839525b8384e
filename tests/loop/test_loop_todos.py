"""TodoWrite in the loop: answered by the loop itself (no CallClient), merge and replace
semantics, the text the model reads, and the list after a rewind and for a conversation the
server did not know. Each test asserts the whole committed state."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import AssistantMessage, TextContent, ToolCall, ToolResultMessage
from cursor_byok.loop import (
    CallLLM,
    Ignored,
    LocalResult,
    RuntimeState,
    Start,
    Status,
    ToolResult,
    Transition,
    TurnContext,
    UserMessage,
    WaitInput,
    transition,
)
from cursor_byok.loop import view as views
from cursor_byok.loop.inputs import Rewind
from cursor_byok.loop.state import AwaitLLM, MeterBasis
from cursor_byok.loop.todos import TodoItem, TodoPatch, TodoStatus, TodoUpdate, replay
from tests.loop.loop_helpers import start, stream, user

CID = "todo"
replace = msgspec.structs.replace
P, IP, DONE, X = (
    TodoStatus.PENDING,
    TodoStatus.IN_PROGRESS,
    TodoStatus.COMPLETED,
    TodoStatus.CANCELLED,
)


def todo_call(call_id: str, merge: bool, *items: dict[str, Any]) -> ToolCall:
    return ToolCall(id=call_id, name="TodoWrite", arguments={"todos": list(items), "merge": merge})


def item(ident: str, content: str | None = None, status: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": ident}
    if content is not None:
        out["content"] = content
    if status is not None:
        out["status"] = status
    return out


def tool_result(call: ToolCall, text: str, *, error: bool = False) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name="TodoWrite",
        content=(TextContent(text=text),),
        is_error=error,
    )


def after_call(state: RuntimeState, *calls: ToolCall) -> tuple[RuntimeState, Any]:
    """The model calls `calls` in one message; the transition that answered them."""
    ts, _ = stream(state, FauxResponse.tool_calls(list(calls)))
    return ts[-1].state, ts[-1]


def first_turn(context: TurnContext | None = None) -> RuntimeState:
    return transition(RuntimeState.new(CID), start("plan it", context)).state


LIST_AB = (TodoItem("a", "write the parser", P), TodoItem("b", "test it", P))
AB_TEXT = (
    "The todo list was replaced; it now has 2 item(s):\n"
    "- [pending] a: write the parser\n"
    "- [pending] b: test it"
)


def test_replace_is_answered_by_the_loop_and_the_model_reads_the_list() -> None:
    s0 = first_turn()
    first_prompt = s0.committed.waiting.prompt  # type: ignore[union-attr]
    assert first_prompt is not None
    call = todo_call(
        "t1", False, item("a", "write the parser", "pending"), item("b", "test it", "pending")
    )
    _, t = after_call(s0, call)
    c = t.state.committed
    before = s0.committed
    assistant = c.log[1]
    expected_result = tool_result(call, AB_TEXT)
    assert c == replace(
        before,
        log=(*before.log, assistant, expected_result),
        messages=(*before.log, assistant, expected_result),
        todos=LIST_AB,
        status=Status.WAITING_LLM,
        waiting=AwaitLLM(
            call_id=f"{CID}:1:llm2",
            messages_hash=c.waiting.messages_hash,  # type: ignore[union-attr]
            prompt=t.command.prompt,
        ),
        llm_calls=2,
        commit=c.commit,
        last_commit_id=c.last_commit_id,
        meter_basis=MeterBasis(chars=first_prompt),  # the answered call's meter
    )
    assert c.commit == before.commit + 1  # one commit for the whole step
    # No CallClient: the next model call goes out at once, with the result in its messages.
    assert isinstance(t.command, CallLLM) and t.command.request.messages[-1] == expected_result
    assert t.local_results == (
        LocalResult(
            call,
            f"{CID}:1:llm1",
            0,
            expected_result,
            TodoUpdate(
                submitted=(TodoPatch("a", "write the parser", P), TodoPatch("b", "test it", P)),
                merge=False,
                todos=LIST_AB,
            ),
        ),
    )


def with_list(todos: tuple[TodoItem, ...] = LIST_AB) -> RuntimeState:
    call = todo_call(
        "t0", False, *({"id": t.id, "content": t.content, "status": t.status} for t in todos)
    )
    s, _ = after_call(first_turn(), call)
    assert s.committed.todos == todos
    return s


def test_merge_updates_by_id_keeps_the_rest_and_appends_new_ids() -> None:
    s = with_list()
    call = todo_call("t2", True, item("a", status="in_progress"), item("c", "ship it"))
    s2, t = after_call(s, call)
    c = s2.committed
    merged = (
        TodoItem("a", "write the parser", IP),
        TodoItem("b", "test it", P),
        TodoItem("c", "ship it", P),
    )
    assert c.todos == merged
    assert c.messages[-1] == tool_result(
        call,
        "The todo list was merged into; it now has 3 item(s):\n"
        "- [in_progress] a: write the parser\n"
        "- [pending] b: test it\n"
        "- [pending] c: ship it",
    )
    (local,) = t.local_results
    assert local.todos == TodoUpdate(
        submitted=(TodoPatch("a", None, IP), TodoPatch("c", "ship it", None)),
        merge=True,
        todos=merged,
    )
    assert isinstance(t.command, CallLLM)
    assert c == replace(
        s.committed,
        log=c.log,
        messages=c.log,
        todos=merged,
        waiting=c.waiting,
        llm_calls=3,
        commit=c.commit,
        last_commit_id=c.last_commit_id,
        meter_basis=MeterBasis(chars=s.committed.waiting.prompt),  # type: ignore[union-attr,arg-type]
    )
    assert c.waiting == replace(
        s.committed.waiting,
        call_id=f"{CID}:1:llm3",  # type: ignore[type-var]
        messages_hash=t.command.messages_hash,
        prompt=t.command.prompt,
    )
    assert c.log[: len(s.committed.log)] == s.committed.log  # append-only


def test_replace_drops_items_not_sent() -> None:
    s = with_list()
    call = todo_call("t2", False, item("z", "only this", "completed"))
    s2, _ = after_call(s, call)
    assert s2.committed.todos == (TodoItem("z", "only this", DONE),)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"todos": "x", "merge": True}, "'todos' must be an array"),
        ({"todos": [], "merge": "yes"}, "'merge' must be true or false"),
        ({"todos": [{"content": "c"}], "merge": True}, "todo 1 has no 'id'"),
        ({"todos": [item("a", "x", "done")], "merge": True}, "'status' must be one of"),
        ({"todos": [item("a", "x", "pending"), item("a", "y")], "merge": True}, "appears twice"),
        ({"todos": [item("q", status="pending")], "merge": True}, "is new and needs 'content'"),
        ({"todos": [item("a", "x")], "merge": False}, "needs both 'content' and 'status'"),
    ],
)
def test_an_unusable_call_is_an_error_result_and_the_list_is_unchanged(
    arguments: dict[str, Any], problem: str
) -> None:
    s = with_list()
    call = ToolCall(id="bad", name="TodoWrite", arguments=arguments)
    s2, t = after_call(s, call)
    c = s2.committed
    assert c.todos == LIST_AB
    last = c.messages[-1]
    assert isinstance(last, ToolResultMessage) and last.is_error
    assert last.text.startswith("Error: the todo list was not changed: ") and problem in last.text
    (local,) = t.local_results
    assert local.todos is None and local.result == last
    assert isinstance(t.command, CallLLM)


def test_two_calls_in_one_message_apply_in_order() -> None:
    s0 = first_turn()
    one = todo_call("t1", False, item("a", "one", "pending"), item("b", "two", "pending"))
    two = todo_call("t2", True, item("b", status="completed"))
    s, t = after_call(s0, one, two)
    assert s.committed.todos == (TodoItem("a", "one", P), TodoItem("b", "two", DONE))
    assert [lr.todos.todos if lr.todos else None for lr in t.local_results] == [
        (TodoItem("a", "one", P), TodoItem("b", "two", P)),
        (TodoItem("a", "one", P), TodoItem("b", "two", DONE)),
    ]


def test_ask_and_plan_modes_offer_it_too() -> None:
    for mode in ("ask", "plan"):
        s0 = first_turn(TurnContext(mode=mode))
        call = todo_call("t1", False, item("a", "look", "pending"), item("b", "tell", "pending"))
        s, _ = after_call(s0, call)
        assert s.committed.todos == (TodoItem("a", "look", P), TodoItem("b", "tell", P))


def test_a_rewind_restores_the_list_of_the_kept_turn() -> None:
    s = with_list()
    ts, _ = stream(s, FauxResponse.text("listed"))
    turn1 = ts[-1].state
    first_end = views.closed(turn1.committed.view, len(turn1.committed.log))
    t2 = transition(turn1, UserMessage(message=user("next")))
    s2, _ = after_call(t2.state, todo_call("t9", True, item("a", status="cancelled")))
    ts, _ = stream(s2, FauxResponse.text("updated"))
    turn2 = ts[-1].state
    assert turn2.committed.todos == (TodoItem("a", "write the parser", X), LIST_AB[1])
    back = transition(turn2, Rewind(view=first_end)).state.committed
    assert (
        back
        == replace(
            turn2.committed,
            view=back.view,  # checked below
            messages=turn1.committed.messages,
            todos=LIST_AB,
            status=Status.READY,
            commit=turn2.committed.commit + 1,
            last_commit_id=f"{CID}@{turn2.committed.commit + 1}",
            turn_starts=turn2.committed.turn_starts[:1],  # turn 2 is gone from the branch
            meter_basis=None,  # no call of the kept turn reported usage
        )
    )
    assert views.closed(back.view, len(back.log)) == first_end
    # And forward again: the later list comes back with its turn.
    second_end = views.closed(turn2.committed.view, len(turn2.committed.log))
    fwd = transition(RuntimeState.of(back), Rewind(view=second_end)).state.committed
    assert fwd.todos == turn2.committed.todos


def test_the_clients_todos_seed_a_conversation_new_to_us_only() -> None:
    seed = (TodoItem("s", "from the IDE", IP),)
    t = transition(RuntimeState.new(CID), Start(user_message=user("hi"), todos=seed))
    c = t.state.committed
    assert c.todos == seed and c.todo_seed == seed
    # A merge builds on the seed, and a rewind to the start keeps it.
    s, _ = after_call(t.state, todo_call("t1", True, item("n", "new", "pending")))
    assert s.committed.todos == (*seed, TodoItem("n", "new", P))
    assert replay(seed, s.committed.messages) == s.committed.todos
    # Once we know the conversation, a Start's todos are ignored: ours win.
    ts, _ = stream(s, FauxResponse.text("ok"))
    again = transition(ts[-1].state, Start(user_message=user("again"), todos=()))
    assert again.state.committed.todos == s.committed.todos
    other = transition(
        ts[-1].state, Start(user_message=user("x"), todos=(TodoItem("q", "IDE", P),))
    )
    assert other.state.committed.todos == s.committed.todos


def test_the_state_round_trips_through_json_with_its_todos() -> None:
    s = with_list()
    c = s.committed
    data = msgspec.json.encode(c)
    assert msgspec.json.decode(data, type=type(c)) == c
    assert b'"todos":[{"id":"a","content":"write the parser","status":"pending"}' in data


def test_an_imported_historys_own_todo_calls_are_covered_by_the_seed() -> None:
    """A conversation that moves to this server with its history and checkpoint list: the
    history's TodoWrite calls are not replayed over the seed, not even after a rewind."""
    old_call = todo_call("h1", False, item("h", "old plan", "pending"), item("i", "x", "pending"))
    history = (
        user("earlier"),
        AssistantMessage(
            content=(old_call,), api="cursor", provider="cursor", model="m", stop_reason="toolUse"
        ),
        tool_result(old_call, "done"),
        AssistantMessage(
            content=(TextContent(text="ok"),),
            api="cursor",
            provider="cursor",
            model="m",
            stop_reason="stop",
        ),
    )
    seed = (TodoItem("s", "from the IDE", DONE),)
    t = transition(
        RuntimeState.new(CID), Start(user_message=user("go"), history=history, todos=seed)
    )
    c0 = t.state.committed
    assert (c0.todos, c0.todo_seed, c0.todo_from) == (seed, seed, 4)
    s, _ = after_call(t.state, todo_call("t1", True, item("n", "new", "pending")))
    ts, _ = stream(s, FauxResponse.text("ok"))
    turn1 = ts[-1].state
    assert turn1.committed.todos == (*seed, TodoItem("n", "new", P))
    first_end = views.closed(turn1.committed.view, len(turn1.committed.log))
    t2 = transition(turn1, UserMessage(message=user("more")))
    s2, _ = after_call(t2.state, todo_call("t2", False, item("z", "other", "pending")))
    ts, _ = stream(s2, FauxResponse.text("ok"))
    back = transition(ts[-1].state, Rewind(view=first_end)).state.committed
    assert back.todos == turn1.committed.todos


def test_a_client_answer_to_a_todo_write_call_is_ignored() -> None:
    read = ToolCall(id="r1", name="Read", arguments={"path": "f"})
    todo = todo_call("t1", False, item("a", "x", "pending"))
    ts, _ = stream(first_turn(), FauxResponse.tool_calls([read, todo]))
    waiting = ts[-1].state
    assert waiting.committed.status == Status.WAITING_CLIENT
    stray = transition(waiting, ToolResult(message=tool_result(todo, "client says hi")))
    assert stray == Transition(waiting, (), WaitInput(), ignored=Ignored.ANSWERED_BY_LOOP)
    done = transition(waiting, ToolResult(message=tool_result(read, "file")))
    assert done.state.committed.todos == (TodoItem("a", "x", P),)
    assert done.state.committed.messages[-1] == tool_result(
        todo, "The todo list was replaced; it now has 1 item(s):\n- [pending] a: x"
    )


_ids = st.sampled_from(["a", "b", "c", "d"])
_statuses = st.sampled_from(["pending", "in_progress", "completed", "cancelled", "bogus"])
_items = st.lists(
    st.fixed_dictionaries(
        {"id": _ids},
        optional={"content": st.sampled_from(["x", "y"]), "status": _statuses},
    ),
    max_size=4,
)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.booleans(), _items),
        st.tuples(st.just("rewind"), st.integers(0, 10), st.just([])),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(steps=_steps)
def test_the_list_is_always_what_the_active_history_implies(
    steps: list[tuple[str, Any, list[dict[str, Any]]]],
) -> None:
    s = RuntimeState.new(CID)
    ends: list[tuple[views.Span, ...]] = []
    n = 0
    for kind_, arg, items in steps:
        if kind_ == "rewind":
            if not ends:
                continue
            s = transition(s, Rewind(view=ends[arg % len(ends)])).state
        else:
            n += 1
            s = transition(s, start(f"turn {n}")).state
            call = ToolCall(id=f"t{n}", name="TodoWrite", arguments={"todos": items, "merge": arg})
            s, _ = after_call(s, call)
            ts, _ = stream(s, FauxResponse.text("ok"))
            s = ts[-1].state
            ends.append(views.closed(s.committed.view, len(s.committed.log)))
        c = s.committed
        assert c.todos == replay(c.todo_seed, c.messages)
        assert len({t.id for t in c.todos}) == len(c.todos)
