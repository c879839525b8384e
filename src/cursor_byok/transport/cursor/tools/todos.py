"""TodoWrite's card, `ToolCall.update_todos_tool_call` (9): the IDE's todo panel.

The loop answers TodoWrite itself (loop/todos.py); nothing goes to the client but the card:
tool_call_started with the submitted items, then tool_call_completed with
`UpdateTodosSuccess{todos: the whole merged list, total_count, was_merge}`, or
`UpdateTodosError` when the call was unusable. Whether the IDE prefers the whole list or only
the submitted items in `success.todos` is unverified ([U], reference §2.10); the whole list is
what a panel that replaces its content on every card needs, and it is what the model reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from ....llm.types import ToolResultMessage
from ....loop.todos import TodoItem, TodoPatch, TodoStatus, TodoUpdate
from ..proto import agent_pb2
from . import cards
from .machine import Handlers, ToolMachine

__all__ = ["TodoWriteMachine", "todo_items"]

_STATUS = {
    TodoStatus.PENDING: agent_pb2.TODO_STATUS_PENDING,
    TodoStatus.IN_PROGRESS: agent_pb2.TODO_STATUS_IN_PROGRESS,
    TodoStatus.COMPLETED: agent_pb2.TODO_STATUS_COMPLETED,
    TodoStatus.CANCELLED: agent_pb2.TODO_STATUS_CANCELLED,
}
_FROM_WIRE = {wire: status for status, wire in _STATUS.items()}
_NAMES = frozenset(s.value for s in TodoStatus)


def _item(item: TodoItem | TodoPatch) -> agent_pb2.TodoItem:
    out = agent_pb2.TodoItem(id=item.id)
    if item.content is not None:
        out.content = item.content
    if item.status is not None:
        out.status = _STATUS[item.status]
    return out


def todo_items(todos: Iterable[TodoItem]) -> list[agent_pb2.TodoItem]:
    return [_item(t) for t in todos]


def decode_todo(data: bytes) -> TodoItem | None:
    """One serialized TodoItem of a checkpoint (`conversation_state.todos`), or None when it is
    not one we can use (no id, or no known status)."""
    try:
        item = agent_pb2.TodoItem.FromString(data)
    except Exception:  # a client's bytes: anything unparsable is skipped
        return None
    status = _FROM_WIRE.get(item.status)
    if not item.id or status is None:
        return None
    return TodoItem(id=item.id, content=item.content, status=status)


def _lenient_args(args: dict[str, Any]) -> agent_pb2.UpdateTodosArgs:
    """The card's args straight from the model's arguments (for an unusable call)."""
    out = agent_pb2.UpdateTodosArgs(merge=args.get("merge") is True)
    raw = args.get("todos")
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, dict):
            continue
        todo = out.todos.add()
        if isinstance(item.get("id"), str):
            todo.id = item["id"]
        if isinstance(item.get("content"), str):
            todo.content = item["content"]
        status = item.get("status")
        if isinstance(status, str) and status in _NAMES:
            todo.status = _STATUS[TodoStatus(status)]
    return out


class TodoWriteMachine(ToolMachine):
    """The card of a call the loop answers; it never sends an exec."""

    CARD: ClassVar[str] = "update_todos_tool_call"
    HANDLERS: ClassVar[Handlers] = {}

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.update_todos_tool_call.args.CopyFrom(_lenient_args(self.args))
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.update_todos_tool_call.result.error.error = text

    def _argument_problem(self) -> str | None:
        # The runtime never sends TodoWrite to the client; should it try, nothing goes out.
        return "Error: TodoWrite is answered by the server, not by the client."

    def _first_exec(self) -> bytes:
        raise RuntimeError("TodoWrite has no exec")

    def complete_todos(
        self, update: TodoUpdate, result: ToolResultMessage, now_ms: int
    ) -> tuple[bytes, bytes]:
        """tool_call_started (the submitted items) and tool_call_completed (the merged list)."""
        del result  # the model's text; the card carries the typed list instead
        tc = self._new_card()
        card = tc.update_todos_tool_call
        card.args.merge = update.merge
        card.args.todos.extend(_item(p) for p in update.submitted)
        started = cards.started_frame(self.call_id, self.model_call_id, tc)
        success = card.result.success
        success.todos.extend(todo_items(update.todos))
        success.total_count = len(update.todos)
        success.was_merge = update.merge
        completed = self.complete_with(tc, now_ms)
        return started, completed
