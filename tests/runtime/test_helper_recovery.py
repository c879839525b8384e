"""A restart while a helper runs (docs/subagents.md, "Durability"): the parent's Task answer
was lost with its stream, so the resumed parent asks the runtime to find the helper's end
(FindHelper) and goes on receiving inputs meanwhile; the helper's end reaches it as one
HelperFound input: at once when the helper's run ends in the same process, by the store's
recheck when it ends in another."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import TextContent, ToolResultMessage
from cursor_byok.transport.connect.run_info import RunStartInfo
from cursor_byok.transport.cursor.tools.subagents import report_text
from cursor_byok.transport.runtime import run_helpers
from tests.runtime.harness import Client, Server, open_server, read_ok, run_request

TASK = FauxResponse.tool_calls([("Task", {"description": "Scan", "prompt": "look"})])
READ = FauxResponse.tool_calls([("Read", {"path": "a.py"})])


def child_run(server: Server, client: Client, tool_call_id: str) -> asyncio.Task[None]:
    headers = {"x-parent-request-id": "parent", "x-parent-agent-tool-call-id": tool_call_id}
    info = RunStartInfo(request_id=client.request_id, transport="runsse", headers=headers)
    task = asyncio.create_task(server.runner.handle(client, info))
    server.tasks.append(task)
    return task


async def crash_mid_helper(db: Path) -> str:
    """Process 1: the parent's Task call is out, its helper waits on a Read; then it dies."""
    first = await open_server(db, [TASK, READ])
    parent = Client("parent")
    parent.hold_execs = True
    parent.say(run_request("c-parent", "scan it"))
    first.start(parent, transport="runsse")
    await parent.until(lambda: bool(parent.held), "the Task exec")
    tool_call_id = parent.held[0].subagent_args.tool_call_id
    child = Client("child")
    child.hold_execs = True
    message = run_request("c-child", "look")
    message.run_request.subagent_type_name = "explore"
    child.say(message)
    child_run(first, child, tool_call_id)
    await child.until(lambda: bool(child.held), "the helper's Read")
    assert await first.store.find_subagent_link("c-parent", tool_call_id) is not None
    await first.crash()
    await first.store.close()
    return tool_call_id


def task_result(server: Server) -> ToolResultMessage:
    (result,) = [
        m for m in server.llm.calls[-1].request.messages if isinstance(m, ToolResultMessage)
    ]
    return result


async def test_the_helpers_end_in_the_same_process_reaches_the_resumed_parent(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db"
    tool_call_id = await crash_mid_helper(db)
    second = await open_server(db, ["found 3 files", "all scanned"], chunk_size=50)
    parent = Client("parent")  # reopened under its request id
    second.start(parent, transport="runsse")
    await asyncio.sleep(0.2)  # the parent waits on its helper, holding nothing up
    assert not parent.finished and second.llm.calls == []
    child = Client("child", answers=[read_ok("x = 1")])
    child_run(second, child, tool_call_id)
    assert await child.ended() is None
    helper_done = time.monotonic()
    assert await parent.ended() is None
    assert time.monotonic() - helper_done < 1.0  # woken by the runner, not the recheck
    assert task_result(second) == ToolResultMessage(
        tool_call_id=task_result(second).tool_call_id,
        tool_name="Task",
        content=(TextContent(text=report_text("found 3 files", "c-child")),),
    )
    assert parent.text() == "all scanned"
    await second.store.close()


async def test_the_helpers_end_in_another_process_reaches_it_by_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_helpers, "RECHECK_S", 0.1)
    db = tmp_path / "db"
    tool_call_id = await crash_mid_helper(db)
    second = await open_server(db, ["all scanned"], chunk_size=50)
    third = await open_server(db, ["found 3 files"], chunk_size=50)
    parent = Client("parent")
    second.start(parent, transport="runsse")
    await asyncio.sleep(0.2)
    assert not parent.finished
    child = Client("child", answers=[read_ok("x = 1")])
    child_run(third, child, tool_call_id)  # the helper goes on in another process
    assert await child.ended() is None
    assert await parent.ended() is None
    assert task_result(second).content == (
        TextContent(text=report_text("found 3 files", "c-child")),
    )
    await third.store.close()
    await second.store.close()


async def test_a_parent_whose_helper_never_ends_reads_an_unknown_outcome(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db"
    await crash_mid_helper(db)
    second = await open_server(db, ["no report"], chunk_size=50)
    second.runner.services.question_timeout_s = 0.3  # the Task call's deadline
    parent = Client("parent")
    second.start(parent, transport="runsse")
    assert await parent.ended() is None
    result = task_result(second)
    assert result.is_error and result.text.startswith(
        "Error: this Task call was sent to the client, but its answer was lost"
    )
    await second.store.close()
