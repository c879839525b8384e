"""The conversation's todo list: what a TodoWrite call does to it, and how a view rebuilds it.

TodoWrite is answered by the server (no exec goes to the client). `merge=true` updates items by
id (fields the call leaves out keep their value; new ids are appended in call order);
`merge=false` replaces the whole list. The model reads the merged list as the tool's result.

The list is kept in `ConversationState.todos`, but it is always derivable from the active
history: `replay` folds the successful TodoWrite calls of a view over the conversation's
`todo_seed` (the IDE's checkpoint todos for a conversation this server did not know). A rewind
uses that, so the list is the one of the kept turn. Pure: no clock, so items carry no
timestamps.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import msgspec

from cursor_byok.llm.types import (
    AssistantMessage,
    Message,
    TextContent,
    ToolCall,
    ToolResultMessage,
)

TODO_WRITE = "TodoWrite"
# Bounds on what one call may hold (a runaway model cannot grow the state without limit).
MAX_TODOS = 200
MAX_TODO_CONTENT = 2000
MAX_TODO_ID = 200


class TodoStatus(enum.StrEnum):
    """Cursor's four statuses, stored by the value the model writes."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


_STATUSES = frozenset(s.value for s in TodoStatus)


class TodoItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    content: str
    status: TodoStatus


class TodoPatch(msgspec.Struct, frozen=True, omit_defaults=True):
    """One submitted item: `content` / `status` None when the call left them out (a merge keeps
    the old value)."""

    id: str
    content: str | None = None
    status: TodoStatus | None = None


class TodoUpdate(msgspec.Struct, frozen=True):
    """A TodoWrite the loop applied: what was submitted, and the whole list after it."""

    submitted: tuple[TodoPatch, ...]
    merge: bool
    todos: tuple[TodoItem, ...]


def parse(arguments: Mapping[str, Any]) -> tuple[tuple[TodoPatch, ...], bool] | str:
    """The call's items and merge flag, or why they are unusable (the model reads it)."""
    merge = arguments.get("merge", False)
    if not isinstance(merge, bool):
        return "'merge' must be true or false"
    raw = arguments.get("todos")
    if not isinstance(raw, list):
        return "'todos' must be an array of {id, content, status} objects"
    if len(raw) > MAX_TODOS:
        return f"at most {MAX_TODOS} todos are kept; this call has {len(raw)}"
    out: list[TodoPatch] = []
    seen: set[str] = set()
    for n, item in enumerate(raw, 1):
        if not isinstance(item, dict):
            return f"todo {n} is not an object"
        ident = item.get("id")
        if not isinstance(ident, str) or not ident.strip():
            return f"todo {n} has no 'id' (a non-empty string)"
        if len(ident) > MAX_TODO_ID:
            return f"todo {n}: 'id' is longer than {MAX_TODO_ID} characters"
        if ident in seen:
            return f"the id {ident!r} appears twice"
        seen.add(ident)
        content = item.get("content")
        if content is not None and not isinstance(content, str):
            return f"todo {ident!r}: 'content' must be a string"
        if isinstance(content, str) and len(content) > MAX_TODO_CONTENT:
            return f"todo {ident!r}: 'content' is longer than {MAX_TODO_CONTENT} characters"
        status = item.get("status")
        if status is not None and (not isinstance(status, str) or status not in _STATUSES):
            allowed = ", ".join(s.value for s in TodoStatus)
            return f"todo {ident!r}: 'status' must be one of {allowed}"
        out.append(
            TodoPatch(
                id=ident,
                content=content,
                status=TodoStatus(status) if status is not None else None,
            )
        )
    return tuple(out), merge


def apply(
    current: tuple[TodoItem, ...], submitted: tuple[TodoPatch, ...], merge: bool
) -> tuple[TodoItem, ...] | str:
    """The list after the call, or why it cannot be applied."""
    if not merge:
        replaced: list[TodoItem] = []
        for p in submitted:
            if p.content is None or p.status is None:
                return f"todo {p.id!r} needs both 'content' and 'status' (merge is false)"
            replaced.append(TodoItem(p.id, p.content, p.status))
        return tuple(replaced)
    items = {t.id: t for t in current}
    order = [t.id for t in current]
    for p in submitted:
        old = items.get(p.id)
        if old is None:
            if p.content is None:
                return f"todo {p.id!r} is new and needs 'content'"
            items[p.id] = TodoItem(p.id, p.content, p.status or TodoStatus.PENDING)
            order.append(p.id)
        else:
            items[p.id] = TodoItem(
                p.id,
                p.content if p.content is not None else old.content,
                p.status if p.status is not None else old.status,
            )
    if len(order) > MAX_TODOS:
        return f"at most {MAX_TODOS} todos are kept; the merged list would have {len(order)}"
    return tuple(items[i] for i in order)


def result_text(update: TodoUpdate) -> str:
    """What the model reads: a confirmation and the whole list (deterministic)."""
    how = "merged into" if update.merge else "replaced"
    head = f"The todo list was {how}; it now has {len(update.todos)} item(s)"
    if not update.todos:
        return head + "."
    lines = [f"- [{t.status.value}] {t.id}: {t.content}" for t in update.todos]
    return head + ":\n" + "\n".join(lines)


def write(
    current: tuple[TodoItem, ...], call: ToolCall
) -> tuple[TodoUpdate, ToolResultMessage] | ToolResultMessage:
    """Answer a TodoWrite call: the update and its result, or an error result (list unchanged)."""
    parsed = parse(call.arguments)
    if isinstance(parsed, tuple):
        submitted, merge = parsed
        todos = apply(current, submitted, merge)
        if isinstance(todos, tuple):
            update = TodoUpdate(submitted=submitted, merge=merge, todos=todos)
            return update, _result(call, result_text(update), is_error=False)
        problem = todos
    else:
        problem = parsed
    return _result(call, f"Error: the todo list was not changed: {problem}.", is_error=True)


def _result(call: ToolCall, text: str, *, is_error: bool) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=(TextContent(text=text),),
        is_error=is_error,
    )


def replay(seed: tuple[TodoItem, ...], messages: tuple[Message, ...]) -> tuple[TodoItem, ...]:
    """The list after the successful TodoWrite calls of `messages`, in result order, starting
    from `seed`. O(messages); used when a rewind changes the view."""
    todos = seed
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if isinstance(message, AssistantMessage):
            calls = {c.id: c for c in message.tool_calls if c.name == TODO_WRITE}
        elif isinstance(message, ToolResultMessage) and not message.is_error:
            call = calls.pop(message.tool_call_id, None)
            if call is None or call.arguments_error is not None:
                continue
            done = write(todos, call)
            if isinstance(done, tuple):
                todos = done[0].todos
    return todos


def plan_todos(raw: object) -> tuple[TodoItem, ...]:
    """CreatePlan's `todos` (`[{id, content}]`) as pending items, bounded like TodoWrite's;
    entries without an id or content are skipped, a repeated id keeps its first."""
    if not isinstance(raw, list):
        return ()
    out: dict[str, TodoItem] = {}
    for item in raw[:MAX_TODOS]:
        if not isinstance(item, Mapping):
            continue
        tid, content = item.get("id"), item.get("content")
        if not isinstance(tid, str) or not isinstance(content, str):
            continue
        tid, content = tid.strip()[:MAX_TODO_ID], content.strip()[:MAX_TODO_CONTENT]
        if tid and content and tid not in out:
            out[tid] = TodoItem(id=tid, content=content, status=TodoStatus.PENDING)
    return tuple(out.values())
