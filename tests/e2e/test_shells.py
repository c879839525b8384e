"""Shell as Cursor runs it, over real HTTP against the REAL server process, through both `Run`
on HTTP/2 and the HTTP/1.1 shim, with our own client playing the IDE:

- a Shell past its block_until_ms: the client backgrounds it and the turn goes on at once, the
  model reading the shell id and the terminal file;
- AwaitShell: read_args of that terminal file on the client, read again until its footer;
- a client that runs the command to completion (never backgrounds) still works;
- background_task_completion_action and background_shell_action start runs that tell the
  model what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    chat_requests,
    exec_of,
    exec_reply,
    http,
    kind,
    request_context,
    shell_stream,
    unique,
)
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

TERMINALS = "/home/tester/.cursor/projects/e2e/terminals"
RUNNING = "---\npid: 4242\ncwd: /w\nrunning_for_ms: 3000\n---\nbooting\nready on :8080\n"
ENDED = RUNNING + "---\nexit_code: 0\nelapsed_ms: 4100\n---\n"

Send = Callable[[agent_pb2.AgentClientMessage], Awaitable[None]]


def ide_context() -> agent_pb2.RequestContext:
    rc = request_context()
    rc.env.terminals_folder = TERMINALS
    return rc


def ide_run_request(text: str, conversation_id: str | None = None) -> agent_pb2.AgentClientMessage:
    req = agent_pb2.AgentRunRequest(conversation_id=conversation_id or str(uuid.uuid4()))
    req.requested_model.model_id = "brain-1"
    uma = req.action.user_message_action
    uma.user_message.text = text
    uma.user_message.message_id = str(uuid.uuid4())
    uma.request_context.CopyFrom(ide_context())
    return agent_pb2.AgentClientMessage(run_request=req)


@contextlib.asynccontextmanager
async def session(server: ServerProcess, transport: str) -> AsyncIterator[tuple[Send, Reader]]:
    """One run over `transport` ("h2" or "shim"): a sender and the reader of its stream."""
    if transport == "h2":
        async with h2_run(server) as (stream, reader):

            async def send_h2(message: agent_pb2.AgentClientMessage) -> None:
                await stream.send(message)

            yield send_h2, reader
        return
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:

            async def send_shim(message: agent_pb2.AgentClientMessage) -> None:
                await run.append(message)

            yield send_shim, reader


TRANSPORTS = pytest.mark.parametrize("transport", ["h2", "shim"])


def cards(reader: Reader, which: str) -> list[agent_pb2.ToolCall]:
    out = []
    for m in reader.messages:
        if kind(m) == f"interaction_update.{which}":
            out.append(getattr(m.interaction_update, which).tool_call)
    return out


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


@TRANSPORTS
async def test_shell_past_block_time_is_backgrounded_and_the_turn_goes_on(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    args = {
        "command": "npm run dev",
        "block_until_ms": 2000,
        "description": "Start the dev server",
        "notify_on_output": {"pattern": "ready on", "reason": "server up"},
    }
    prompt = unique(f"[tool Shell {json.dumps(args)}]")
    async with session(server, transport) as (send, reader):
        await send(ide_run_request(prompt))
        ask = await reader.wait_for(exec_of("shell_stream_args"))
        esm = ask.exec_server_message
        sa = esm.shell_stream_args
        assert (sa.command, sa.timeout, sa.timeout_behavior) == (
            "npm run dev",
            2000,
            agent_pb2.TIMEOUT_BEHAVIOR_BACKGROUND,
        )
        assert sa.description == "Start the dev server" and sa.close_stdin
        assert (sa.output_notification.pattern, sa.output_notification.reason) == (
            "ready on",
            "server up",
        )
        assert esm.exec_id == sa.tool_call_id
        await send(shell_stream(esm.id, start=agent_pb2.ShellStreamStart()))
        await send(shell_stream(esm.id, stdout=agent_pb2.ShellStreamStdout(data="booting\n")))
        # The block time is up: the client backgrounds it. No exit ever comes.
        bg = agent_pb2.ShellStreamBackgrounded(
            shell_id=3,
            command="npm run dev",
            pid=4242,
            ms_to_wait=2000,
            reason=agent_pb2.SHELL_BACKGROUND_REASON_TIMEOUT,
        )
        await send(shell_stream(esm.id, backgrounded=bg))
        # The terminal shell_result the IDE sends after it: the call is already over.
        late = agent_pb2.ShellResult(
            success=agent_pb2.ShellSuccess(command="npm run dev", shell_id=3, pid=4242),
            is_background=True,
            terminals_folder=TERMINALS,
        )
        await send(exec_reply(esm.id, shell_result=late))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    (started,) = cards(reader, "tool_call_started")
    assert started.shell_tool_call.args.timeout == 2000
    assert not started.shell_tool_call.HasField("result")
    (done,) = cards(reader, "tool_call_completed")
    result = done.shell_tool_call.result
    assert result.WhichOneof("result") == "success"
    assert result.is_background and result.terminals_folder == TERMINALS
    assert (result.success.shell_id, result.success.pid, result.success.stdout) == (
        3,
        4242,
        "booting\n",
    )
    assert result.success.background_reason == agent_pb2.SHELL_BACKGROUND_REASON_TIMEOUT
    _first, second = chat_requests(upstream, prompt)
    (tool,) = tool_messages(second)
    assert tool["content"] == (
        "The command is still running: it was moved to the background after 2000 ms "
        "(block_until_ms) as shell 3 (pid 4242); its output goes on to the terminal file "
        f'{TERMINALS}/3.txt. Call AwaitShell with shell_id "3" to wait for it. The output so '
        "far follows.\nstdout:\nbooting\n"
    )
    kinds = reader.kinds
    assert kinds.index("interaction_update.tool_call_completed") < kinds.index(
        "interaction_update.turn_ended"
    )


def read_answer(exec_id: int, path: str, content: str) -> agent_pb2.AgentClientMessage:
    success = agent_pb2.ReadSuccess(path=path, content=content, file_size=len(content))
    return exec_reply(exec_id, read_result=agent_pb2.ReadResult(success=success))


@TRANSPORTS
async def test_await_shell_reads_the_terminal_file_on_the_client(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique('[tool AwaitShell {"shell_id": "3", "block_until_ms": 20000}]')
    path = f"{TERMINALS}/3.txt"
    async with session(server, transport) as (send, reader):
        await send(ide_run_request(prompt))
        first = (await reader.wait_for(exec_of("read_args"))).exec_server_message
        assert first.read_args.path == path
        await send(read_answer(first.id, path, RUNNING))
        # Still running: the server reads the file again about a second later.
        second = (
            await reader.wait_for(
                lambda m: exec_of("read_args")(m) and m.exec_server_message.id != first.id
            )
        ).exec_server_message
        assert second.read_args.path == path
        await send(read_answer(second.id, path, ENDED))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    reads = [m for m in reader.messages if exec_of("read_args")(m)]
    assert len(reads) == 2
    gap = [t for t, m in reader.events if exec_of("read_args")(m)]
    assert gap[1] - gap[0] >= 0.8  # the poll interval, not a busy loop
    (started,) = cards(reader, "tool_call_started")
    assert (started.await_tool_call.args.task_id, started.await_tool_call.args.block_until_ms) == (
        "3",
        20000,
    )
    (done,) = cards(reader, "tool_call_completed")
    complete = done.await_tool_call.result.complete
    assert (complete.task_id, complete.exit_code, complete.output_file_path) == ("3", 0, path)
    assert complete.runtime_ms == 4100 and complete.wake_reason == "the command ended"
    _first, after = chat_requests(upstream, prompt)
    (tool,) = tool_messages(after)
    assert tool["content"].startswith("Shell 3: the command ended after waiting ")
    assert tool["content"].endswith(
        f"ms.\nFinished. Exit code: 0\nRunning time: 4100 ms\nOutput ({path}):\n"
        "booting\nready on :8080"
    )


@TRANSPORTS
async def test_await_shell_without_a_shell_waits_and_sends_nothing(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique('[tool AwaitShell {"block_until_ms": 1200}]')
    async with session(server, transport) as (send, reader):
        await send(ide_run_request(prompt))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    assert not any(kind(m) == "exec_server_message" for m in reader.messages)
    (started,) = cards(reader, "tool_call_started")
    assert not started.await_tool_call.args.task_id
    (done,) = cards(reader, "tool_call_completed")
    stamps = {
        w: t
        for t, m in reader.events
        for w in ("tool_call_started", "tool_call_completed")
        if kind(m) == f"interaction_update.{w}"
    }
    assert stamps["tool_call_completed"] - stamps["tool_call_started"] >= 1.1
    assert done.await_tool_call.result.complete.wake_reason == "the wait is over"
    assert done.await_tool_call.result.complete.runtime_ms >= 1200
    _first, after = chat_requests(upstream, prompt)
    (tool,) = tool_messages(after)
    assert tool["content"].startswith("Waited ")
    assert tool["content"].endswith(" ms (no shell_id: nothing was polled).")


@TRANSPORTS
async def test_a_client_that_runs_to_completion_still_works(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique('[tool Shell {"command": "make build", "block_until_ms": 500}]')
    async with session(server, transport) as (send, reader):
        await send(ide_run_request(prompt))
        esm = (await reader.wait_for(exec_of("shell_stream_args"))).exec_server_message
        assert esm.shell_stream_args.timeout == 500
        await send(shell_stream(esm.id, start=agent_pb2.ShellStreamStart()))
        await send(shell_stream(esm.id, stdout=agent_pb2.ShellStreamStdout(data="built\n")))
        # Well past the block time, the command ends; this client never backgrounds.
        await asyncio.sleep(1.0)
        await send(shell_stream(esm.id, exit=agent_pb2.ShellStreamExit(code=0)))
        result = agent_pb2.ShellResult(
            success=agent_pb2.ShellSuccess(command="make build", exit_code=0, stdout="built\n")
        )
        await send(exec_reply(esm.id, shell_result=result))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    (done,) = cards(reader, "tool_call_completed")
    assert done.shell_tool_call.result.success.exit_code == 0
    assert not done.shell_tool_call.result.is_background
    _first, second = chat_requests(upstream, prompt)
    (tool,) = tool_messages(second)
    assert tool["content"] == "Exit code: 0\nstdout:\nbuilt\n"


async def run_action(
    server: ServerProcess, transport: str, cid: str, action: agent_pb2.ConversationAction
) -> Reader:
    """A run_request carrying `action`; the client answers the context request as the IDE."""
    async with session(server, transport) as (send, reader):
        await send(action_request(cid, action))
        ask = await reader.wait_for(exec_of("request_context_args"))
        answer = exec_reply(ask.exec_server_message.id)
        answer.exec_client_message.request_context_result.success.request_context.CopyFrom(
            ide_context()
        )
        await send(answer)
        assert await reader.wait_end() == {} and reader.turn_ended
    return reader


def action_request(conversation_id: str, action: agent_pb2.ConversationAction) -> Any:
    req = agent_pb2.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = "brain-1"
    req.action.CopyFrom(action)
    return agent_pb2.AgentClientMessage(run_request=req)


@TRANSPORTS
async def test_background_actions_start_runs_that_tell_the_model(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    cid = str(uuid.uuid4())
    first = unique("start the server please")
    async with session(server, transport) as (send, reader):
        await send(ide_run_request(first, cid))
        assert await reader.wait_end() == {} and reader.turn_ended

    completion = agent_pb2.ConversationAction()
    done = completion.background_task_completion_action.completions.add()
    done.task_id = "3"
    done.kind = agent_pb2.BACKGROUND_TASK_KIND_SHELL
    done.status = agent_pb2.BACKGROUND_TASK_STATUS_ERROR
    title = unique("npm run dev")
    done.title = title
    done.output_path = f"{TERMINALS}/3.txt"
    done.reason = agent_pb2.BACKGROUND_TASK_COMPLETION_REASON_TASK_FINISHED
    done.tool_call_id = "call_t1"
    reader = await run_action(server, transport, cid, completion)
    notice = (
        "[Notice from the client, not typed by the user: background work changed.]\n"
        f"- Background shell 3 ({title}) finished with an error.\n"
        "  Started by tool call call_t1.\n"
        f"  Its output is in {TERMINALS}/3.txt.\n"
        'Use AwaitShell (block_until_ms 0) on shell_id "3" to read the final output, then '
        "carry on with the task."
    )
    (previous,) = chat_requests(upstream, title)
    body = previous
    users = [m for m in body["messages"] if m["role"] == "user"]
    assert [u["content"] for u in users[-2:]] == [first, notice]
    assert "".join(reader.texts) == f"You said: {notice}"

    moved = agent_pb2.ConversationAction()
    call = f"call_{uuid.uuid4().hex[:8]}"
    moved.background_shell_action.tool_call_id = call
    reader = await run_action(server, transport, cid, moved)
    (body,) = chat_requests(upstream, f"Shell call {call}")
    last = body["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith(
        "[Notice from the client, not typed by the user: the user moved the command of Shell "
        f"call {call} to the background.]"
    )
    # The conversation so far is sent unchanged before it (the prompt cache prefix).
    assert body["messages"][: len(previous["messages"])] == previous["messages"]
    assert body["tools"] == previous["tools"]


# -- WriteShellStdin (opt-in) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def stdin_server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("stdin")
    extra = 'enabled_tools = ["WriteShellStdin"]'
    with server_process(brain_config(upstream.base_url, db=work / "db", extra=extra), work) as srv:
        yield srv


def offered_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


@TRANSPORTS
async def test_write_shell_stdin_types_into_a_background_shell(
    stdin_server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique('[tool WriteShellStdin {"shell_id": "3", "chars": "yes\\n"}]')
    async with session(stdin_server, transport) as (send, reader):
        await send(ide_run_request(prompt))
        esm = (await reader.wait_for(exec_of("write_shell_stdin_args"))).exec_server_message
        assert (esm.write_shell_stdin_args.shell_id, esm.write_shell_stdin_args.chars) == (
            3,
            "yes\n",
        )
        ok = agent_pb2.WriteShellStdinResult(
            success=agent_pb2.WriteShellStdinSuccess(
                shell_id=3, terminal_file_length_before_input_written=812
            )
        )
        await send(exec_reply(esm.id, write_shell_stdin_result=ok))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    (started,) = cards(reader, "tool_call_started")
    assert started.write_shell_stdin_tool_call.args.chars == "yes\n"
    (done,) = cards(reader, "tool_call_completed")
    assert done.write_shell_stdin_tool_call.result == ok
    first, second = chat_requests(upstream, prompt)
    names = offered_names(first)
    assert names.index("WriteShellStdin") == names.index("AwaitShell") + 1
    (tool,) = tool_messages(second)
    assert tool["content"] == (
        f"Wrote 4 character(s) to the stdin of shell 3. Its output goes on in {TERMINALS}/3.txt "
        "(it was 812 bytes long before the input); AwaitShell reads what the command does next."
    )


@TRANSPORTS
async def test_with_write_shell_stdin_on_shell_keeps_stdin_open(
    stdin_server: ServerProcess, transport: str
) -> None:
    prompt = unique('[tool Shell {"command": "python3 -i", "block_until_ms": 0}]')
    async with session(stdin_server, transport) as (send, reader):
        await send(ide_run_request(prompt))
        esm = (await reader.wait_for(exec_of("shell_stream_args"))).exec_server_message
        assert not esm.shell_stream_args.close_stdin
        # A client that does not know write_shell_stdin_args would throw; this one ends the
        # command at once.
        result = agent_pb2.ShellResult(
            success=agent_pb2.ShellSuccess(command="python3 -i", exit_code=0)
        )
        await send(exec_reply(esm.id, shell_result=result))
        assert await reader.wait_end() == {} and reader.turn_ended


@TRANSPORTS
async def test_write_shell_stdin_refused_by_a_client_that_does_not_know_it(
    stdin_server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique('[tool WriteShellStdin {"shell_id": "3", "chars": "q"}]')
    async with session(stdin_server, transport) as (send, reader):
        await send(ide_run_request(prompt))
        esm = (await reader.wait_for(exec_of("write_shell_stdin_args"))).exec_server_message
        throw = agent_pb2.ExecClientControlMessage(
            throw=agent_pb2.ExecClientThrow(id=esm.id, error="unknown exec type")
        )
        await send(agent_pb2.AgentClientMessage(exec_client_control_message=throw))
        assert await reader.wait_end() == {} and reader.turn_ended
    _first, second = chat_requests(upstream, prompt)
    (tool,) = tool_messages(second)
    assert tool["content"] == (
        "Error: the client could not run the WriteShellStdin call: unknown exec type"
    )


async def test_write_shell_stdin_is_off_unless_named(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    prompt = unique('[tool Shell {"command": "true"}]')
    async with session(server, "shim") as (send, reader):
        await send(ide_run_request(prompt))
        esm = (await reader.wait_for(exec_of("shell_stream_args"))).exec_server_message
        assert esm.shell_stream_args.close_stdin  # the default: stdin closed
        result = agent_pb2.ShellResult(success=agent_pb2.ShellSuccess(command="true"))
        await send(exec_reply(esm.id, shell_result=result))
        assert await reader.wait_end() == {}
    first, _ = chat_requests(upstream, prompt)
    assert "WriteShellStdin" not in offered_names(first)
