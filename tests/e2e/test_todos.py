"""TodoWrite end to end, against the REAL server process with the scripted brain upstream:
answered by the server (no exec reaches the client), the `update_todos_tool_call` card
started and completed, the merged list as the tool result the model reads next, the list in
the checkpoint, and the list kept across kill -9 and restored by a rewind.

The brain's `[tool NAME {json}]` pattern ends at the first `}]`, so the prompts write the
todos array as `[{...} ]` (a space before its closing bracket)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_crash_recovery import (
    Crashable,
    ShimRun,
    complete_turn,
    crashable,  # noqa: F401 (fixture)
    db_state,
    requests_with,
    user_run_request,
)
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shim import Reader, chat_requests, content_text, http, kind, run_request, unique
from tests.e2e.test_shim import ShimRun as SseRun
from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream

PENDING, IN_PROGRESS, COMPLETED = (
    a.TODO_STATUS_PENDING,
    a.TODO_STATUS_IN_PROGRESS,
    a.TODO_STATUS_COMPLETED,
)


def todo_prompt(merge: bool, *items: dict[str, str]) -> str:
    body = json.dumps({"merge": merge, "todos": list(items)})
    assert body.endswith("}]}")
    return f"[tool TodoWrite {body[:-2]} ]}}]"


def item(ident: str, content: str | None = None, status: str | None = None) -> dict[str, str]:
    out = {"id": ident}
    if content is not None:
        out["content"] = content
    if status is not None:
        out["status"] = status
    return out


def todo(ident: str, content: str, status: int) -> a.TodoItem:
    return a.TodoItem(id=ident, content=content, status=status)


REPLACE_AB = todo_prompt(
    False, item("a", "read the spec", "in_progress"), item("b", "write the code", "pending")
)
LIST_AB = [todo("a", "read the spec", IN_PROGRESS), todo("b", "write the code", PENDING)]
AB_TEXT = (
    "The todo list was replaced; it now has 2 item(s):\n"
    "- [in_progress] a: read the spec\n"
    "- [pending] b: write the code"
)

Opened = tuple[Callable[[a.AgentClientMessage], Awaitable[None]], Reader]


@contextlib.asynccontextmanager
async def opened(server: ServerProcess, transport: str) -> AsyncIterator[Opened]:
    """A run over `Run` on HTTP/2 or over the HTTP/1.1 shim: (send, reader)."""
    if transport == "h2":
        async with h2_run(server) as (stream, reader):
            yield stream.send, reader
        return
    async with http(server) as client:
        run = SseRun(client)
        async with run.subscribe() as reader:

            async def send(message: a.AgentClientMessage) -> None:
                await run.append(message)

            yield send, reader


def update(m: a.AgentServerMessage, which: str) -> Any:
    return getattr(m.interaction_update, which)


@pytest.mark.parametrize("transport", ["h2", "shim"])
async def test_todo_write_is_answered_by_the_server_with_its_card(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique(REPLACE_AB)
    async with opened(server, transport) as (send, reader):
        await send(run_request(prompt))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended

    # Nothing but the card went to the client: no exec of any kind.
    assert not [k for k in reader.kinds if k.startswith("exec_server_message")], reader.kinds
    kinds = [k for k in reader.kinds if k != "interaction_update.heartbeat"]
    partial = [m for m in reader.messages if kind(m) == "interaction_update.partial_tool_call"]
    assert partial and all(
        update(m, "partial_tool_call").tool_call.HasField("update_todos_tool_call") for m in partial
    )
    (started,) = [m for m in reader.messages if kind(m) == "interaction_update.tool_call_started"]
    (done,) = [m for m in reader.messages if kind(m) == "interaction_update.tool_call_completed"]
    s, d = update(started, "tool_call_started"), update(done, "tool_call_completed")
    args = a.UpdateTodosArgs(todos=LIST_AB, merge=False)
    assert s.tool_call.WhichOneof("tool") == "update_todos_tool_call"
    assert s.tool_call.update_todos_tool_call == a.UpdateTodosToolCall(args=args)
    assert s.tool_call.tool_call_id == "call_t1"
    assert d.call_id == s.call_id and d.model_call_id == s.model_call_id
    assert d.tool_call.WhichOneof("tool") == "update_todos_tool_call"
    success = a.UpdateTodosSuccess(todos=LIST_AB, total_count=2, was_merge=False)
    assert d.tool_call.update_todos_tool_call == a.UpdateTodosToolCall(
        args=args, result=a.UpdateTodosResult(success=success)
    )
    assert d.tool_call.tool_call_id == "call_t1"
    assert d.tool_call.completed_at_ms >= d.tool_call.started_at_ms > 0
    assert kinds.index("interaction_update.tool_call_started") < kinds.index(
        "interaction_update.tool_call_completed"
    )
    assert kinds.index("interaction_update.tool_call_completed") < kinds.index(
        "interaction_update.turn_ended"
    )

    # The model reads the list in the next request.
    first, second = chat_requests(upstream, prompt)
    (tool,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool["tool_call_id"] == "call_t1" and content_text(tool["content"]) == AB_TEXT
    assert "".join(reader.texts).startswith("Let me check.The tool said: The todo list was")
    # The next request extends the first (prompt cache): same tools, same prefix.
    assert second["tools"] == first["tools"]
    assert second["messages"][: len(first["messages"])] == first["messages"]
    names = [t["function"]["name"] for t in first["tools"]]
    assert "TodoWrite" in names  # offered in agent mode (docs/tools.md)

    # The checkpoints carry the list, each item serialized inline (field 3): the one after the
    # model call that wrote it (the loop answered it, so nothing is pending) and the turn's last.
    mid, checkpoint = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.HasField("conversation_checkpoint_update")
    ]
    assert [a.TodoItem.FromString(b) for b in mid.todos] == LIST_AB
    assert list(mid.pending_tool_calls) == []
    assert [a.TodoItem.FromString(b) for b in checkpoint.todos] == LIST_AB
    assert len(checkpoint.turns) == len(mid.turns) == 1


def last_tool_text(upstream: FakeUpstream, prompt: str) -> str:
    sent = requests_with(upstream, prompt)
    assert len(sent) == 2, len(sent)
    body = json.loads(sent[1].body)
    return content_text([m for m in body["messages"] if m["role"] == "tool"][-1]["content"])


def completed_card(run: ShimRun) -> a.UpdateTodosToolCall:
    (done,) = [
        m.interaction_update.tool_call_completed.tool_call.update_todos_tool_call
        for m in run.result.messages
        if m.interaction_update.WhichOneof("message") == "tool_call_completed"
    ]
    return done


async def test_todos_survive_kill9_between_turns_and_ours_win(
    crashable: Crashable,  # noqa: F811 (fixture)
    upstream: FakeUpstream,
) -> None:
    conv = "conv-todos-crash"
    crashable.start()
    run1 = await complete_turn(crashable.url, "todo-crash-1", user_run_request(conv, REPLACE_AB))
    assert [e.WhichOneof("message") for e in run1.execs] == ["request_context_args"]
    assert completed_card(run1).result.success.todos == LIST_AB
    stored = db_state(crashable.db, conv)
    assert stored is not None and stored["todos"] == [
        {"id": "a", "content": "read the spec", "status": "in_progress"},
        {"id": "b", "content": "write the code", "status": "pending"},
    ]
    crashable.kill9()
    crashable.start()

    # The IDE sends its checkpoint back, but with a different list: the server knows this
    # conversation, so its own list is the one merged into.
    state = a.ConversationStateStructure()
    state.CopyFrom(run1.checkpoints[-1][1])
    del state.todos[:]
    state.todos.append(todo("zzz", "not ours", PENDING).SerializeToString())
    prompt = todo_prompt(True, item("b", status="completed"), item("c", "ship it"))
    run2 = await complete_turn(
        crashable.url, "todo-crash-2", user_run_request(conv, prompt, state=state)
    )
    merged = [
        todo("a", "read the spec", IN_PROGRESS),
        todo("b", "write the code", COMPLETED),
        todo("c", "ship it", PENDING),
    ]
    assert [e.WhichOneof("message") for e in run2.execs] == ["request_context_args"]
    card = completed_card(run2)
    assert card.args == a.UpdateTodosArgs(
        todos=[a.TodoItem(id="b", status=COMPLETED), a.TodoItem(id="c", content="ship it")],
        merge=True,
    )
    assert card.result.success == a.UpdateTodosSuccess(todos=merged, total_count=3, was_merge=True)
    assert last_tool_text(upstream, prompt) == (
        "The todo list was merged into; it now has 3 item(s):\n"
        "- [in_progress] a: read the spec\n"
        "- [completed] b: write the code\n"
        "- [pending] c: ship it"
    )
    assert [a.TodoItem.FromString(b) for b in run2.checkpoints[-1][1].todos] == merged


async def test_a_rewind_restores_the_todos_of_the_kept_turn(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    conv = unique("conv-todos-rewind").replace(" ", "-")
    run1 = await complete_turn(server.url, unique("rw1"), user_run_request(conv, REPLACE_AB))
    after1 = run1.checkpoints[-1][1]
    done_b = todo_prompt(True, item("b", status="completed"))
    run2 = await complete_turn(
        server.url, unique("rw2"), user_run_request(conv, done_b, state=after1)
    )
    assert completed_card(run2).result.success.todos[1] == todo("b", "write the code", COMPLETED)

    # The user goes back to the end of turn one: b is pending again there.
    add_c = unique(todo_prompt(True, item("c", "ship it", "pending")))
    run3 = await complete_turn(
        server.url, unique("rw3"), user_run_request(conv, add_c, state=after1)
    )
    restored = [*LIST_AB, todo("c", "ship it", PENDING)]
    assert completed_card(run3).result.success == a.UpdateTodosSuccess(
        todos=restored, total_count=3, was_merge=True
    )
    assert last_tool_text(upstream, add_c) == (
        "The todo list was merged into; it now has 3 item(s):\n"
        "- [in_progress] a: read the spec\n"
        "- [pending] b: write the code\n"
        "- [pending] c: ship it"
    )
    after3 = run3.checkpoints[-1][1]
    assert [a.TodoItem.FromString(b) for b in after3.todos] == restored
    assert len(after3.turns) == 2 and after3.turns[0] == after1.turns[0]


async def test_the_ides_todos_seed_a_conversation_new_to_the_server(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    conv = unique("conv-todos-seed").replace(" ", "-")
    state = a.ConversationStateStructure()
    state.todos.append(todo("ide", "from the IDE", IN_PROGRESS).SerializeToString())
    state.todos.append(b"\xff not a todo")  # unusable bytes are skipped
    prompt = unique(todo_prompt(True, item("n", "next step", "pending")))
    run = await complete_turn(
        server.url, unique("seed"), user_run_request(conv, prompt, state=state)
    )
    assert completed_card(run).result.success.todos == [
        todo("ide", "from the IDE", IN_PROGRESS),
        todo("n", "next step", PENDING),
    ]
    assert last_tool_text(upstream, prompt).endswith(
        "- [in_progress] ide: from the IDE\n- [pending] n: next step"
    )
