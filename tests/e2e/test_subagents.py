"""Task and its child runs over real HTTP against the REAL server process (docs/subagents.md).

Our Connect client plays the IDE on `Run` (HTTP/2) and on the HTTP/1.1 shim: the parent's
model calls Task, the IDE gets exec `subagent_args`, opens the child's run the way the
reference describes (§3.5: a new conversation, `subagent_type_name`, the chosen model, the
prompt as its user message; on the shim the parent headers on its BidiAppend), the child calls
UpdateCurrentStep and reports, and the IDE answers the parent's exec with the child's final
message. Each test checks the exec and cards, the child's tools and prompt in its upstream
request, the text the parent's model reads, and turn_ended on both runs.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from cursor_byok.loop.catalogue import Mode, offered
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_queries import Send, cards, ide, tool_names, tool_prompt
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shells import run_action
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    chat_requests,
    content_text,
    exec_of,
    exec_reply,
    http,
    run_request,
)
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

TRANSPORTS = ["h2", "shim"]
MODELS = ["composer-test", "claude-opus-5", "brain-1"]  # claude-opus-5 is not served here


@pytest.fixture(scope="module")
def sserver(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("subagents")
    extra = "subagent_max_depth = 2"
    with server_process(brain_config(upstream.base_url, db=work / "db", extra=extra), work) as srv:
        yield srv


def parent_request(prompt: str, **fields: Any) -> a.AgentClientMessage:
    message = run_request(prompt)
    for name in MODELS:
        message.run_request.selected_subagent_models.add(model_id=name)
    for key, value in fields.items():
        getattr(message.run_request, key).extend(value)
    return message


def task_prompt(child_prompt: str, **args: Any) -> str:
    return tool_prompt("Task", {"description": "Scan the code", "prompt": child_prompt, **args})


@contextlib.asynccontextmanager
async def child_ide(
    server: ServerProcess, transport: str, headers: dict[str, str]
) -> AsyncIterator[tuple[Send, Reader]]:
    """The child's run, as the IDE opens it: on the shim its BidiAppends carry `headers`."""
    if transport == "h2":
        async with h2_run(server) as (stream, reader):
            yield stream.send, reader
        return
    async with http(server) as client:
        run = ShimRun(client)

        async def send(message: a.AgentClientMessage) -> None:
            await run.append(message, headers=headers)

        async with run.subscribe() as reader:
            yield send, reader


def child_request(args: a.SubagentArgs, conversation_id: str) -> a.AgentClientMessage:
    message = run_request(args.prompt, conversation_id, model=args.model_id)
    message.run_request.subagent_type_name = args.subagent_type
    return message


async def serve_child(
    server: ServerProcess, transport: str, args: a.SubagentArgs, parent_request_id: str
) -> tuple[str, Reader]:
    """Open the child's run and let it finish: (its conversation id, its reader)."""
    child_id = str(uuid.uuid4())
    headers = {
        "x-parent-request-id": parent_request_id,
        "x-parent-agent-tool-call-id": args.tool_call_id,
    }
    async with child_ide(server, transport, headers) as (send, reader):
        await send(child_request(args, child_id))
        end = await reader.wait_end(30)
    assert end == {} and reader.turn_ended
    return child_id, reader


def request_id_of(send: Send) -> str:
    run = getattr(send, "__self__", None)
    return run.request_id if isinstance(run, ShimRun) else ""


def sent_card_call_id(reader: Reader) -> str:
    (started,) = [
        m.interaction_update.tool_call_started
        for m in reader.messages
        if m.interaction_update.HasField("tool_call_started")
    ]
    return started.call_id


def totals(reader: Reader) -> a.TurnEndedUpdate:
    (ended,) = [
        m.interaction_update.turn_ended
        for m in reader.messages
        if m.interaction_update.HasField("turn_ended")
    ]
    return ended


def tool_text(body: dict[str, Any]) -> str:
    (tool,) = [m for m in body["messages"] if m["role"] == "tool"]
    return content_text(tool["content"])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_task_opens_a_child_run_whose_report_the_parent_reads(
    sserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    child_prompt = f"[helper Reading files] scan the parser #{uuid.uuid4().hex[:8]}"
    prompt = task_prompt(
        child_prompt,
        subagent_type="explore",
        model="composer-test",
        file_attachments=["docs/diagram.png"],
    )
    first_request = parent_request(prompt)
    parent_id = first_request.run_request.conversation_id
    async with ide(sserver, transport) as (send, reader):
        await send(first_request)
        sent = await reader.wait_for(exec_of("subagent_args"))
        args = sent.exec_server_message.subagent_args
        assert args.tool_call_id == "call_t1"
        assert args.subagent_type == "explore"
        assert args.model_id == "composer-test"
        assert args.prompt == child_prompt
        assert not args.run_in_background
        assert args.parent_conversation_id == first_request.run_request.conversation_id
        assert args.root_parent_conversation_id == args.parent_conversation_id
        assert args.environment == a.SUBAGENT_ENVIRONMENT_LOCAL
        (image,) = args.selected_context.selected_images
        assert (image.path, image.mime_type) == ("docs/diagram.png", "image/png")
        (started,) = cards(reader, "tool_call_started")
        assert started.WhichOneof("tool") == "task_tool_call"
        assert started.task_tool_call.args.description == "Scan the code"
        assert started.task_tool_call.args.subagent_type.WhichOneof("type") == "explore"
        assert started.task_tool_call.args.model == "composer-test"
        assert list(started.task_tool_call.args.attachments) == ["docs/diagram.png"]

        child_id, child = await serve_child(sserver, transport, args, request_id_of(send))
        # Linked to its parent's call (shim: by the headers; HTTP/2: by its prompt).
        assert f"conversation {child_id}: a child run whose parent" not in sserver.log()
        steps = cards(child, "tool_call_completed")
        assert [c.WhichOneof("tool") for c in steps] == ["communicate_update_tool_call"]
        assert steps[0].communicate_update_tool_call.args.current_step == "Reading files"
        assert steps[0].communicate_update_tool_call.result.success.current_step == "Reading files"
        final = "Helper report: Reading files done, 3 files found."
        assert "".join(child.texts).endswith(final)
        # The parent's Task card shows the helper's progress as it happens.
        (progress,) = [
            m.interaction_update.tool_call_delta
            for m in reader.messages
            if m.interaction_update.HasField("tool_call_delta")
        ]
        assert progress.call_id == sent_card_call_id(reader)
        inner = progress.tool_call_delta.task_tool_call_delta.interaction_update
        step = inner.tool_call_completed.tool_call.communicate_update_tool_call
        assert step.args.current_step == "Reading files"

        success = a.SubagentSuccess(agent_id=child_id, final_message=final, tool_call_count=1)
        await send(
            exec_reply(
                sent.exec_server_message.id, subagent_result=a.SubagentResult(success=success)
            )
        )
        end = await reader.wait_end(30)
    assert end == {} and reader.turn_ended
    (done,) = cards(reader, "tool_call_completed")
    assert done.task_tool_call.result.success.agent_id == child_id
    assert not done.task_tool_call.result.success.is_background
    # Totals: the child's own (two calls: 120 + 60 uncached input tokens, 40 cache reads),
    # and the parent turn's, which adds the child's to its own two calls.
    child_totals, parent_totals = totals(child), totals(reader)
    assert (child_totals.input_tokens, child_totals.cache_read_tokens) == (180, 40)
    assert (parent_totals.input_tokens, parent_totals.cache_read_tokens) == (360, 80)
    assert parent_totals.output_tokens > child_totals.output_tokens > 0
    # The dashboard's drill-down of the parent shows its helper, with the helper's own totals.
    async with http(sserver) as client:
        drill = (await client.get(f"/dashboard/api/conversation?id={parent_id}")).json()
    (helper,) = drill["helpers"]
    assert helper["conversation_id"] == child_id
    assert (helper["parent_tool_call_id"], helper["subagent_type"], helper["depth"]) == (
        "call_t1",
        "explore",
        1,
    )
    assert (helper["llm_calls"], helper["input_tokens"], helper["cache_read_tokens"]) == (
        2,
        180,
        40,
    )
    assert helper["output_tokens"] == child_totals.output_tokens
    assert helper["helpers"] == []

    # The child's model request: its own conversation, the subagent tools and our prompt.
    (child_first, _child_second) = chat_requests(upstream, child_prompt)[-2:]
    assert tool_names(child_first) == list(offered(Mode.SUBAGENT))
    assert "Task" in tool_names(child_first)  # depth 1 of 2: it may start its own helper
    system = content_text(child_first["messages"][0]["content"])
    assert "You are a helper agent" in system
    assert "explore: search and read, change nothing" in system

    # The parent's model reads the child's final message and its agent id.
    first, second = chat_requests(upstream, prompt)
    task_tool = next(t for t in first["tools"] if t["function"]["name"] == "Task")
    assert task_tool["function"]["parameters"]["properties"]["model"]["enum"] == [
        "inherit",
        "composer-test",
        "brain-1",
    ]
    assert tool_text(second) == (
        f"{final}\n\n(Helper agent id: {child_id}. Pass it as resume to continue this helper.)"
    )
    assert json.dumps(second["messages"][: len(first["messages"])]) == json.dumps(first["messages"])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_background_task_returns_at_once_and_its_completion_tells_the_model(
    sserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    child_prompt = f"[helper Indexing] index the docs #{uuid.uuid4().hex[:8]}"
    prompt = task_prompt(child_prompt, run_in_background=True)
    first_request = parent_request(prompt)
    parent_id = first_request.run_request.conversation_id
    child_id = str(uuid.uuid4())
    async with ide(sserver, transport) as (send, reader):
        await send(first_request)
        sent = await reader.wait_for(exec_of("subagent_args"))
        args = sent.exec_server_message.subagent_args
        assert args.run_in_background and args.model_id == "brain-1"  # inherit
        backgrounded = a.SubagentSuccess(
            agent_id=child_id, background_reason=a.SUBAGENT_BACKGROUND_REASON_AGENT_REQUEST
        )
        await send(
            exec_reply(
                sent.exec_server_message.id,
                subagent_result=a.SubagentResult(success=backgrounded),
            )
        )
        end = await reader.wait_end(30)
    assert end == {} and reader.turn_ended
    (done,) = cards(reader, "tool_call_completed")
    assert done.task_tool_call.result.success.is_background
    assert (
        done.task_tool_call.result.success.background_reason
        == a.SUBAGENT_BACKGROUND_REASON_AGENT_REQUEST
    )
    _first, second = chat_requests(upstream, prompt)
    assert tool_text(second) == (
        f"The helper runs in the background (agent id {child_id}). You will be told when it "
        "finishes; go on with other work meanwhile."
    )

    # The IDE runs the child (under the agent id it gave), then tells the parent.
    headers = {"x-parent-request-id": "", "x-parent-agent-tool-call-id": ""}
    async with child_ide(sserver, transport, headers) as (csend, creader):
        await csend(child_request(args, child_id))
        assert await creader.wait_end(30) == {}
    completion = a.BackgroundTaskCompletion(
        task_id=child_id,
        kind=a.BACKGROUND_TASK_KIND_SUBAGENT,
        status=a.BACKGROUND_TASK_STATUS_SUCCESS,
        reason=a.BACKGROUND_TASK_COMPLETION_REASON_TASK_FINISHED,
        title="Scan the code",
        subagent_id=child_id,
        tool_call_id="call_t1",
    )
    action = a.ConversationAction()
    action.background_task_completion_action.completions.append(completion)
    reader = await run_action(sserver, transport, parent_id, action)
    assert reader.turn_ended
    marker = f"Final message of helper {child_id}:"
    (notified,) = chat_requests(upstream, marker)
    notice = content_text(notified["messages"][-1]["content"])
    assert f"Background subagent {child_id} (Scan the code) finished successfully." in notice
    assert notice.endswith(f"{marker}\nHelper report: Indexing done, 3 files found.")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cancel_subagent_ends_that_child_and_the_parent_goes_on(
    sserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    child_prompt = f"[slow 20] a long look #{uuid.uuid4().hex[:8]}"
    prompt = task_prompt(child_prompt)
    first_request = parent_request(prompt)
    parent_id = first_request.run_request.conversation_id
    child_id = str(uuid.uuid4())
    async with ide(sserver, transport) as (send, reader):
        await send(first_request)
        sent = await reader.wait_for(exec_of("subagent_args"))
        args = sent.exec_server_message.subagent_args
        headers = {
            "x-parent-request-id": request_id_of(send),
            "x-parent-agent-tool-call-id": args.tool_call_id,
        }
        async with child_ide(sserver, transport, headers) as (csend, creader):
            await csend(child_request(args, child_id))
            assert await wait_for_upstream(upstream, child_prompt)
            cancel = a.AgentClientMessage()
            cancel.run_request.conversation_id = parent_id
            cancel.run_request.requested_model.model_id = "brain-1"
            cancel.run_request.action.cancel_subagent_action.subagent_id = child_id
            async with ide(sserver, transport) as (xsend, xreader):
                await xsend(cancel)
                assert await xreader.wait_end(30) == {}
            assert xreader.turn_ended
            child_end = await creader.wait_end(30)
        assert child_end is not None
        assert not any("You said" in t for t in creader.texts)  # it never finished
        failed = a.SubagentError(agent_id=child_id, error="canceled by the user")
        await send(
            exec_reply(sent.exec_server_message.id, subagent_result=a.SubagentResult(error=failed))
        )
        end = await reader.wait_end(30)
    assert end == {} and reader.turn_ended  # the parent's turn ends normally
    _first, second = chat_requests(upstream, prompt)
    assert tool_text(second) == (
        f"Error: the helper (agent id {child_id}) failed: canceled by the user"
    )


async def wait_for_upstream(upstream: FakeUpstream, marker: str) -> bool:
    from tests.e2e.test_shim import wait_until

    return await wait_until(lambda: bool(chat_requests(upstream, marker)), 15)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_checkpoint_carries_the_clients_helper_fields_back(
    sserver: ServerProcess, transport: str
) -> None:
    message = run_request(f"hello #{uuid.uuid4().hex[:8]}")
    state = message.run_request.conversation_state
    state.subagent_states["agent-1"].CopyFrom(
        a.SubagentPersistedState(created_timestamp_ms=5, last_used_timestamp_ms=9, model_id="m")
    )
    state.subagent_runs_by_parent_tool_call_id["call_9"].CopyFrom(
        a.SubagentRun(
            parent_tool_call_id="call_9",
            subagent_id="agent-1",
            status=a.SUBAGENT_RUN_STATUS_SUCCESS,
            title="Scan",
        )
    )
    state.subagent_threads["agent-1"] = "thread-1"
    async with ide(sserver, transport) as (send, reader):
        await send(message)
        assert await reader.wait_end(30) == {}
    (checkpoint,) = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.WhichOneof("message") == "conversation_checkpoint_update"
    ]
    assert dict(checkpoint.subagent_states) == dict(state.subagent_states)
    assert dict(checkpoint.subagent_runs_by_parent_tool_call_id) == dict(
        state.subagent_runs_by_parent_tool_call_id
    )
    assert dict(checkpoint.subagent_threads) == {"agent-1": "thread-1"}
    assert len(checkpoint.turns) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_resume_continues_the_childs_conversation(
    sserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    first_prompt = f"[helper Mapping] map the modules #{tag}"
    prompt = task_prompt(first_prompt)
    request = parent_request(prompt)
    parent_id = request.run_request.conversation_id
    async with ide(sserver, transport) as (send, reader):
        await send(request)
        sent = await reader.wait_for(exec_of("subagent_args"))
        args = sent.exec_server_message.subagent_args
        child_id, child = await serve_child(sserver, transport, args, request_id_of(send))
        final = "".join(child.texts).split("Let me check.")[-1]
        success = a.SubagentSuccess(agent_id=child_id, final_message=final)
        await send(
            exec_reply(
                sent.exec_server_message.id, subagent_result=a.SubagentResult(success=success)
            )
        )
        assert await reader.wait_end(30) == {}

    # The next turn resumes that helper: the IDE opens a run on the child's own conversation.
    again = f"[helper Rechecking] look again #{tag}"
    prompt2 = task_prompt(again, resume=child_id)
    follow = run_request(prompt2, parent_id)
    async with ide(sserver, transport) as (send, reader):
        await send(follow)
        sent = await reader.wait_for(exec_of("subagent_args"))
        args2 = sent.exec_server_message.subagent_args
        assert args2.resume_agent_id == child_id
        (started,) = cards(reader, "tool_call_started")
        assert started.task_tool_call.args.resume == child_id
        headers = {
            "x-parent-request-id": request_id_of(send),
            "x-parent-agent-tool-call-id": args2.tool_call_id,
        }
        async with child_ide(sserver, transport, headers) as (csend, creader):
            await csend(child_request(args2, child_id))
            assert await creader.wait_end(30) == {}
        success = a.SubagentSuccess(agent_id=child_id, final_message="rechecked")
        await send(
            exec_reply(
                sent.exec_server_message.id, subagent_result=a.SubagentResult(success=success)
            )
        )
        assert await reader.wait_end(30) == {}
    # The helper's model saw its first task and report before the new one, in its own
    # conversation, still with the subagent tools.
    helper_calls = [
        b for b in chat_requests(upstream, again) if "UpdateCurrentStep" in tool_names(b)
    ]
    (resumed, _after) = helper_calls
    texts = [content_text(m["content"]) for m in resumed["messages"] if m["role"] != "system"]
    assert first_prompt in texts[0]
    assert any("Helper report: Mapping done" in t for t in texts)
    assert again in texts[-1]
    assert tool_names(resumed) == list(offered(Mode.SUBAGENT))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_childs_selected_context_reaches_its_model(
    sserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """The IDE's attachments on the child's run (`UserMessage.selected_context`) reach the
    helper's model with its task, as for any turn."""
    prompt = f"summarise the attached file #{uuid.uuid4().hex[:8]}"
    args = a.SubagentArgs(
        tool_call_id="call_x", subagent_type="explore", model_id="brain-1", prompt=prompt
    )
    message = child_request(args, str(uuid.uuid4()))
    selected = message.run_request.action.user_message_action.user_message.selected_context
    selected.files.add(
        path="/w/src/parser.py", relative_path="src/parser.py", content="def parse(): ..."
    )
    async with child_ide(sserver, transport, {}) as (send, reader):
        await send(message)
        assert await reader.wait_end(30) == {}
    (body,) = chat_requests(upstream, prompt)
    user = content_text(body["messages"][-1]["content"])
    assert "Attached file src/parser.py:\n```\ndef parse(): ...\n```" in user
    assert tool_names(body) == list(offered(Mode.SUBAGENT))
