"""TodoWrite's card (`update_todos_tool_call`, 9): the started and completed frames of a call
the loop applied, the error card of an unusable one, no exec ever, and the checkpoint's todo
items read back."""

from __future__ import annotations

from cursor_byok.llm.types import TextContent, ToolResultMessage
from cursor_byok.loop.todos import TodoItem, TodoPatch, TodoStatus, TodoUpdate
from cursor_byok.transport.cursor import checkpoint
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools.todos import TodoWriteMachine, decode_todo
from tests.cursor.tool_support import T0, Ids, completed_card, decode, machine, started_card

ARGS = {"merge": True, "todos": [{"id": "a", "status": "completed"}, {"id": "n", "content": "new"}]}
UPDATE = TodoUpdate(
    submitted=(TodoPatch("a", None, TodoStatus.COMPLETED), TodoPatch("n", "new", None)),
    merge=True,
    todos=(
        TodoItem("a", "first", TodoStatus.COMPLETED),
        TodoItem("n", "new", TodoStatus.PENDING),
    ),
)


def _result(text: str, error: bool = False) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id="toolu_1",
        tool_name="TodoWrite",
        content=(TextContent(text=text),),
        is_error=error,
    )


def test_an_applied_call_gets_started_then_completed_with_the_merged_list() -> None:
    tool = machine("TodoWrite", ARGS)
    assert isinstance(tool, TodoWriteMachine)
    frames = tool.complete_todos(UPDATE, _result("listed"), T0)
    started = started_card(decode(frames[:1]))
    args = a.UpdateTodosArgs(
        todos=[
            a.TodoItem(id="a", status=a.TODO_STATUS_COMPLETED),
            a.TodoItem(id="n", content="new"),
        ],
        merge=True,
    )
    assert started == a.ToolCall(
        tool_call_id="toolu_1", update_todos_tool_call=a.UpdateTodosToolCall(args=args)
    )
    done = completed_card(frames[1])
    success = a.UpdateTodosSuccess(
        todos=[
            a.TodoItem(id="a", content="first", status=a.TODO_STATUS_COMPLETED),
            a.TodoItem(id="n", content="new", status=a.TODO_STATUS_PENDING),
        ],
        total_count=2,
        was_merge=True,
    )
    assert done.update_todos_tool_call == a.UpdateTodosToolCall(
        args=args, result=a.UpdateTodosResult(success=success)
    )


def test_an_unusable_call_gets_the_error_card() -> None:
    tool = machine("TodoWrite", {"merge": "x", "todos": [{"id": "a", "status": "bogus"}, 3]})
    card = completed_card(tool.complete_locally(_result("Error: bad", error=True), T0))
    assert card.update_todos_tool_call == a.UpdateTodosToolCall(
        args=a.UpdateTodosArgs(todos=[a.TodoItem(id="a")], merge=False),
        result=a.UpdateTodosResult(error=a.UpdateTodosError(error="Error: bad")),
    )


def test_starting_it_never_sends_an_exec() -> None:
    started = machine("TodoWrite", ARGS).start(Ids(), T0)
    assert len(started.frames) == 1 and started.early is not None
    kinds = [m.WhichOneof("message") for m in decode((*started.frames, started.early.card))]
    assert kinds == ["interaction_update", "interaction_update"]
    assert started.early.result.is_error


def test_checkpoint_todos_round_trip_and_junk_is_skipped() -> None:
    frame = a.AgentServerMessage.FromString(checkpoint([b"t1"], UPDATE.todos))
    items = [decode_todo(b) for b in frame.conversation_checkpoint_update.todos]
    assert items == list(UPDATE.todos)
    assert list(frame.conversation_checkpoint_update.turns) == [b"t1"]
    assert decode_todo(a.TodoItem(id="x").SerializeToString()) is None  # no status
    assert decode_todo(a.TodoItem(status=a.TODO_STATUS_PENDING).SerializeToString()) is None
    assert decode_todo(b"\xff\xff") is None
