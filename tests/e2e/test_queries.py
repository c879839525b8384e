"""CreatePlan and Build, AskQuestion (with its async form), SwitchMode and the IDE's refusal
paths, over real HTTP against the REAL server process: `Run` on HTTP/2 and the HTTP/1.1 shim,
with our own client answering the interaction queries as the IDE would (reference §2.11-2.13,
§3.1-3.3). Each test checks the query sent, the exact card, the tool result the model reads in
the next upstream request, and turn_ended."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.loop.catalogue import Mode, offered
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_crash_recovery import Crashable
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    chat_requests,
    content_text,
    context_reply,
    exec_of,
    http,
    is_kind,
    request_context,
    run_request,
    unique,
)
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

QUESTION_TIMEOUT_S = 2.0
TRANSPORTS = ["h2", "shim"]
Send = Callable[[a.AgentClientMessage], Awaitable[None]]


@pytest.fixture(scope="module")
def qserver(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("queries")
    extra = f"question_timeout_s = {QUESTION_TIMEOUT_S}"
    with server_process(brain_config(upstream.base_url, db=work / "db", extra=extra), work) as srv:
        yield srv


@contextlib.asynccontextmanager
async def ide(server: ServerProcess, transport: str) -> AsyncIterator[tuple[Send, Reader]]:
    """One run, over HTTP/2 `Run` or the shim, as (send, reader)."""
    if transport == "h2":
        async with h2_run(server) as (stream, reader):

            async def send(message: a.AgentClientMessage) -> None:
                await stream.send(message)

            yield send, reader
        return
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            yield run.send, reader


def query_of(name: str) -> Callable[[a.AgentServerMessage], bool]:
    return lambda m: (
        m.WhichOneof("message") == "interaction_query"
        and (m.interaction_query.WhichOneof("query") == name)
    )


def respond(query_id: int, **variant: Any) -> a.AgentClientMessage:
    return a.AgentClientMessage(interaction_response=a.InteractionResponse(id=query_id, **variant))


def cards(reader: Reader, kind: str) -> list[a.ToolCall]:
    return [
        getattr(m.interaction_update, kind).tool_call
        for m in reader.messages
        if is_kind(f"interaction_update.{kind}")(m)
    ]


def checkpoint_modes(reader: Reader) -> list[int]:
    return [
        m.conversation_checkpoint_update.mode
        for m in reader.messages
        if m.WhichOneof("message") == "conversation_checkpoint_update"
    ]


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [content_text(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def system_text(body: dict[str, Any]) -> str:
    return content_text(body["messages"][0]["content"])


def with_mode(message: a.AgentClientMessage, mode: int) -> a.AgentClientMessage:
    message.run_request.action.user_message_action.user_message.mode = mode
    return message


def tool_prompt(name: str, args: dict[str, Any]) -> str:
    # The brain's `[tool Name {json}]` ends at the first "}]": keep nested ones spaced.
    raw = json.dumps(args).replace("}]", "} ]").replace("]}", "] }")
    return unique(f"[tool {name} {raw}]")


def action_request(conversation_id: str, action: a.ConversationAction) -> a.AgentClientMessage:
    req = a.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = "brain-1"
    req.action.CopyFrom(action)
    return a.AgentClientMessage(run_request=req)


PLAN_TEXT = "# Add a cache\n\n1. Measure.\n2. Add an LRU in front of the loader."
# What each mode offers: the catalogue's table (docs/tools.md), the query tools among them.
AGENT_TOOLS = list(offered(Mode.AGENT))
PLAN_TOOLS = list(offered(Mode.PLAN))
ASK_TOOLS = list(offered(Mode.ASK))
assert "SwitchMode" in AGENT_TOOLS and "CreatePlan" not in AGENT_TOOLS
assert "CreatePlan" in PLAN_TOOLS and "AskQuestion" in PLAN_TOOLS and "AskQuestion" in ASK_TOOLS


# -- CreatePlan and Build ---------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_create_plan_saves_the_plan_ends_the_turn_and_build_carries_it_out(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    marker = uuid.uuid4().hex[:8]
    plan = f"{PLAN_TEXT}\n3. Ship it ({marker})."
    args = {
        "plan": plan,
        "overview": "Cache the loader.",
        "name": "Loader cache",
        "todos": [{"id": "t1", "content": "Measure"}, {"id": "t2", "content": "Add the LRU"}],
    }
    prompt = tool_prompt("CreatePlan", args)
    message = with_mode(run_request(prompt), a.AGENT_MODE_PLAN)
    conversation_id = message.run_request.conversation_id
    uri = f"file:///home/tester/.cursor/plans/loader-cache-{marker}.plan.md"
    async with ide(qserver, transport) as (send, reader):
        await send(message)
        asked = await reader.wait_for(query_of("create_plan_request_query"))
        query = asked.interaction_query.create_plan_request_query
        assert query.tool_call_id == "call_t1"
        assert query.args.plan == plan and query.args.name == "Loader cache"
        assert query.args.overview == "Cache the loader."
        assert [(t.id, t.content, t.status) for t in query.args.todos] == [
            ("t1", "Measure", a.TODO_STATUS_PENDING),
            ("t2", "Add the LRU", a.TODO_STATUS_PENDING),
        ]
        result = a.CreatePlanResult(success=a.CreatePlanSuccess(), plan_uri=uri)
        response = a.CreatePlanRequestResponse(result=result)
        await send(respond(asked.interaction_query.id, create_plan_request_response=response))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    (started,) = cards(reader, "tool_call_started")
    assert started.WhichOneof("tool") == "create_plan_tool_call"
    assert started.create_plan_tool_call.args == query.args
    (done,) = cards(reader, "tool_call_completed")
    assert done.WhichOneof("tool") == "create_plan_tool_call"
    assert done.create_plan_tool_call.args == query.args
    assert done.create_plan_tool_call.result == result
    # The turn ended on the plan: no second model call.
    assert len(chat_requests(upstream, prompt)) == 1
    assert not [t for t in reader.texts if "The tool said" in t]

    # Build: the IDE sends no plan text here; the server's recorded plan is carried out, in
    # agent mode (execution_mode absent).
    build = a.ConversationAction(execute_plan_action=a.ExecutePlanAction(plan_file_uri=uri))
    build.execute_plan_action.request_context.CopyFrom(request_context())
    async with ide(qserver, transport) as (send, reader):
        await send(action_request(conversation_id, build))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    _plan_turn, body = chat_requests(upstream, marker)
    last = content_text(body["messages"][-1]["content"])
    assert last.startswith("The user pressed Build: carry out this plan now")
    assert f"<plan>\n{plan}\n</plan>" in last and uri in last
    assert tool_names(body) == AGENT_TOOLS
    assert "plan mode" not in system_text(body)
    # The plan turn's history is there: the CreatePlan call and its result.
    assert any("The plan was saved as " + uri in t for t in tool_messages(body))
    # Issue 24 §5: from the Build on, the plan's steps are the todo list (its checkpoint).
    (state,) = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.HasField("conversation_checkpoint_update")
    ][-1:]
    listed = [a.TodoItem.FromString(t) for t in state.todos]
    assert [(t.id, t.content) for t in listed] == [("t1", "Measure"), ("t2", "Add the LRU")]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_build_runs_in_the_mode_execution_mode_names_with_the_ides_plan(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    marker = uuid.uuid4().hex[:8]
    content = f"# From the file\n\nStep one ({marker})."
    epa = a.ExecutePlanAction(
        plan_file_content=content,
        plan_file_uri=f"file:///p/{marker}.plan.md",
        execution_mode=a.AGENT_MODE_ASK,
    )
    epa.plan.plan = "an older copy that must not win"
    epa.request_context.CopyFrom(request_context())
    action = a.ConversationAction(execute_plan_action=epa)
    async with ide(qserver, transport) as (send, reader):
        await send(action_request(str(uuid.uuid4()), action))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    (body,) = chat_requests(upstream, marker)
    last = content_text(body["messages"][-1]["content"])
    assert f"<plan>\n{content}\n</plan>" in last and "older copy" not in last
    assert "ask mode" in system_text(body)
    assert tool_names(body) == ASK_TOOLS


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_start_plan_action_runs_the_users_message_in_plan_mode(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    text = unique("plan a refactor")
    spa = a.StartPlanAction()
    spa.user_message.text = text
    spa.request_context.CopyFrom(request_context())
    async with ide(qserver, transport) as (send, reader):
        await send(action_request(str(uuid.uuid4()), a.ConversationAction(start_plan_action=spa)))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    assert "".join(reader.texts) == f"You said: {text}"
    (body,) = chat_requests(upstream, text)
    assert "plan mode" in system_text(body)
    assert tool_names(body) == PLAN_TOOLS


# -- AskQuestion ------------------------------------------------------------------------------

QUESTIONS = {
    "title": "Storage",
    "questions": [
        {
            "id": "db",
            "prompt": "Which database?",
            "options": [{"id": "pg", "label": "Postgres"}, {"id": "sq", "label": "SQLite"}],
        },
        {
            "id": "extras",
            "prompt": "Which extras?",
            "options": [{"id": "idx", "label": "Indexes"}, {"id": "bk", "label": "Backups"}],
            "allow_multiple": True,
        },
    ],
}


async def ask(
    server: ServerProcess, transport: str, answer: Callable[[int], a.AgentClientMessage] | None
) -> tuple[str, Reader, a.AskQuestionInteractionQuery]:
    prompt = tool_prompt("AskQuestion", QUESTIONS)
    async with ide(server, transport) as (send, reader):
        await send(run_request(prompt))
        asked = await reader.wait_for(query_of("ask_question_interaction_query"))
        query = asked.interaction_query.ask_question_interaction_query
        if answer is not None:
            await send(answer(asked.interaction_query.id))
        end = await reader.wait_end(QUESTION_TIMEOUT_S + 20)
    assert end == {} and reader.turn_ended
    return prompt, reader, query


def answered(result: a.AskQuestionResult) -> Callable[[int], a.AgentClientMessage]:
    response = a.AskQuestionInteractionResponse(result=result)
    return lambda qid: respond(qid, ask_question_interaction_response=response)


def only_tool_result(upstream: FakeUpstream, prompt: str) -> str:
    first, second = chat_requests(upstream, prompt)
    assert second["messages"][: len(first["messages"])] == first["messages"]  # extended
    assert tool_names(second) == tool_names(first)
    (text,) = tool_messages(second)
    return text


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_ask_question_answers_become_the_tool_result(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    success = a.AskQuestionSuccess()
    success.answers.add(question_id="db", selected_option_ids=["sq"])
    success.answers.add(
        question_id="extras", selected_option_ids=["idx", "bk"], freeform_text="nightly"
    )
    result = a.AskQuestionResult(success=success)
    prompt, reader, query = await ask(qserver, transport, answered(result))
    assert query.tool_call_id == "call_t1"
    assert query.args.title == "Storage" and not query.args.run_async
    assert [(q.id, q.prompt, q.allow_multiple) for q in query.args.questions] == [
        ("db", "Which database?", False),
        ("extras", "Which extras?", True),
    ]
    assert [(o.id, o.label) for o in query.args.questions[0].options] == [
        ("pg", "Postgres"),
        ("sq", "SQLite"),
    ]
    (done,) = cards(reader, "tool_call_completed")
    assert done.WhichOneof("tool") == "ask_question_tool_call"
    assert done.ask_question_tool_call.args == query.args
    assert done.ask_question_tool_call.result == result
    assert only_tool_result(upstream, prompt) == (
        "The user answered:\n"
        "- Which database?: SQLite [sq]\n"
        '- Which extras?: Indexes [idx], Backups [bk]; in their own words: "nightly"'
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_rejected_question_is_an_error_result_and_the_turn_goes_on(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    result = a.AskQuestionResult(rejected=a.AskQuestionRejected(reason="not now"))
    prompt, reader, _query = await ask(qserver, transport, answered(result))
    (done,) = cards(reader, "tool_call_completed")
    assert done.ask_question_tool_call.result == result
    text = only_tool_result(upstream, prompt)
    assert text == "The user declined to answer the question(s): not now"
    assert "".join(reader.texts).endswith(f"The tool said: {text}")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_unknown_variant_answer_is_an_error_result(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    def newer_ide(qid: int) -> a.AgentClientMessage:
        # A response variant this server does not know (field 99): parsed as unknown fields.
        raw = a.InteractionResponse(id=qid).SerializeToString() + bytes([0x9A, 0x06, 0x00])
        return a.AgentClientMessage(interaction_response=a.InteractionResponse.FromString(raw))

    prompt, reader, _query = await ask(qserver, transport, newer_ide)
    (done,) = cards(reader, "tool_call_completed")
    assert done.ask_question_tool_call.result.WhichOneof("result") == "error"
    text = only_tool_result(upstream, prompt)
    assert text == (
        "Error: the client answered the AskQuestion request with an empty (or unknown) "
        "response instead of its answer; the call did not happen."
    )
    assert done.ask_question_tool_call.result.error.error_message == text


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_wrong_variant_answer_is_an_error_result(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    def confused(qid: int) -> a.AgentClientMessage:
        response = a.SwitchModeRequestResponse(approved=a.SwitchModeRequestResponse.Approved())
        return respond(qid, switch_mode_request_response=response)

    prompt, _reader, _query = await ask(qserver, transport, confused)
    assert only_tool_result(upstream, prompt) == (
        "Error: the client answered the AskQuestion request with a switch_mode_request_response "
        "instead of its answer; the call did not happen."
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_unanswered_question_ends_at_the_question_deadline(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt, reader, _query = await ask(qserver, transport, None)
    # A query has no abort message; nothing else was sent to the client.
    assert not [m for m in reader.messages if is_kind("exec_server_control_message.abort")(m)]
    (done,) = cards(reader, "tool_call_completed")
    assert done.ask_question_tool_call.result.WhichOneof("result") == "error"
    text = only_tool_result(upstream, prompt)
    # The question deadline (2 s), not tool_timeout_s (600 s), bounded the wait.
    assert re.fullmatch(
        r"Error: the client did not answer the AskQuestion call within 2(\.\d+)? s; it was "
        r"aborted\. Its effects, if any, are unknown\.",
        text,
    ), text


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_async_question_then_its_completion_action(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    result = a.AskQuestionResult(**{"async": a.AskQuestionAsync()})
    prompt = tool_prompt("AskQuestion", QUESTIONS)
    message = run_request(prompt)
    conversation_id = message.run_request.conversation_id
    async with ide(qserver, transport) as (send, reader):
        await send(message)
        asked = await reader.wait_for(query_of("ask_question_interaction_query"))
        args = asked.interaction_query.ask_question_interaction_query.args
        await send(answered(result)(asked.interaction_query.id))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    text = only_tool_result(upstream, prompt)
    assert text.startswith("The question form is open for the user; their answers will arrive")

    success = a.AskQuestionSuccess()
    success.answers.add(question_id="db", selected_option_ids=["pg"])
    done = a.AsyncAskQuestionCompletionAction(
        original_tool_call_id="call_t1",
        original_args=args,
        result=a.AskQuestionResult(success=success),
    )
    action = a.ConversationAction(async_ask_question_completion_action=done)
    async with ide(qserver, transport) as (send, reader):
        await send(action_request(conversation_id, action))
        # The action carries no context: the server asks for it, as for any such run.
        context = await reader.wait_for(exec_of("request_context_args"))
        await send(context_reply(context.exec_server_message.id))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    expected = (
        "(The answers to the questions of AskQuestion call call_t1)\n"
        "The user answered:\n- Which database?: Postgres [pg]\n- Which extras?: (not answered)"
    )
    body = chat_requests(upstream, "AskQuestion call call_t1")[-1]  # this run's, the latest
    assert content_text(body["messages"][-1]["content"]) == expected
    assert "".join(reader.texts) == f"You said: {expected}"


# -- SwitchMode -------------------------------------------------------------------------------


async def switch(
    server: ServerProcess, transport: str, response: a.SwitchModeRequestResponse
) -> tuple[str, Reader, a.SwitchModeRequestQuery]:
    prompt = tool_prompt(
        "SwitchMode", {"target_mode_id": "plan", "explanation": "A larger change."}
    )
    async with ide(server, transport) as (send, reader):
        await send(run_request(prompt))
        asked = await reader.wait_for(query_of("switch_mode_request_query"))
        query = asked.interaction_query.switch_mode_request_query
        await send(respond(asked.interaction_query.id, switch_mode_request_response=response))
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    return prompt, reader, query


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_approved_switch_changes_the_mode_for_the_next_model_call(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    approved = a.SwitchModeRequestResponse(approved=a.SwitchModeRequestResponse.Approved())
    prompt, reader, query = await switch(qserver, transport, approved)
    assert query.args.target_mode_id == "plan"
    assert query.args.explanation == "A larger change."
    assert query.args.tool_call_id == "call_t1"
    (done,) = cards(reader, "tool_call_completed")
    assert done.WhichOneof("tool") == "switch_mode_tool_call"
    assert done.switch_mode_tool_call.args == query.args
    success = done.switch_mode_tool_call.result.success
    assert (success.from_mode_id, success.to_mode_id) == ("agent", "plan")
    first, second = chat_requests(upstream, prompt)
    assert tool_names(first) == AGENT_TOOLS and "plan mode" not in system_text(first)
    assert tool_names(second) == PLAN_TOOLS and "plan mode" in system_text(second)
    # The turn's checkpoint carries the new mode (ConversationStateStructure.mode, 10); the one
    # after the model call that asked for the switch, the mode it was made in.
    assert checkpoint_modes(reader) == [a.AGENT_MODE_AGENT, a.AGENT_MODE_PLAN]
    # The history of the turn is one request extended by the next (the mode changes the
    # system prompt and tools, never the messages).
    assert second["messages"][1 : len(first["messages"])] == first["messages"][1:]
    assert tool_messages(second) == [
        "The user approved: the conversation is now in plan mode (was agent). Its tools apply "
        "from your next step."
    ]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_rejected_switch_keeps_the_mode_and_the_model_reads_why(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    rejected = a.SwitchModeRequestResponse(
        rejected=a.SwitchModeRequestResponse.Rejected(reason="keep going")
    )
    prompt, reader, _query = await switch(qserver, transport, rejected)
    (done,) = cards(reader, "tool_call_completed")
    assert done.switch_mode_tool_call.result.rejected.reason == "keep going"
    first, second = chat_requests(upstream, prompt)
    assert tool_names(second) == tool_names(first) == AGENT_TOOLS
    assert checkpoint_modes(reader) == [a.AGENT_MODE_AGENT, a.AGENT_MODE_AGENT]
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert tool_messages(second) == [
        "The user declined switching to plan mode: keep going. Stay in agent mode."
    ]


# -- a rejected exec --------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_rejected_exec_is_a_result_the_model_reads(
    qserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique('[tool Read {"path": "secret.env"}]')
    async with ide(qserver, transport) as (send, reader):
        await send(run_request(prompt))
        asked = await reader.wait_for(exec_of("read_args"))
        rejected = a.ReadResult(rejected=a.ReadRejected(path="secret.env", reason="private"))
        reply = a.AgentClientMessage(
            exec_client_message=a.ExecClientMessage(
                id=asked.exec_server_message.id, read_result=rejected
            )
        )
        await send(reply)
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    (done,) = cards(reader, "tool_call_completed")
    assert done.WhichOneof("tool") == "read_tool_call"
    assert only_tool_result(upstream, prompt) == "The user rejected reading secret.env: private"


# -- the plan survives a restart --------------------------------------------------------------


async def test_a_plan_survives_a_kill_9_between_the_plan_and_build(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    crashable = Crashable(upstream, tmp_path)
    try:
        server = crashable.start()
        marker = uuid.uuid4().hex[:8]
        plan = f"{PLAN_TEXT}\n3. Survive ({marker})."
        prompt = tool_prompt("CreatePlan", {"plan": plan, "name": "Survivor"})
        message = with_mode(run_request(prompt), a.AGENT_MODE_PLAN)
        uri = f"file:///plans/{marker}.plan.md"
        async with ide(server, "shim") as (send, reader):
            await send(message)
            asked = await reader.wait_for(query_of("create_plan_request_query"))
            result = a.CreatePlanResult(success=a.CreatePlanSuccess(), plan_uri=uri)
            response = a.CreatePlanRequestResponse(result=result)
            await send(respond(asked.interaction_query.id, create_plan_request_response=response))
            assert await reader.wait_end() == {} and reader.turn_ended
        crashable.kill9()
        server = crashable.start()
        build = a.ConversationAction(execute_plan_action=a.ExecutePlanAction())
        build.execute_plan_action.request_context.CopyFrom(request_context())
        async with ide(server, "h2") as (send, reader):
            await send(action_request(message.run_request.conversation_id, build))
            assert await reader.wait_end() == {} and reader.turn_ended
        _plan_turn, body = chat_requests(upstream, marker)
        last = content_text(body["messages"][-1]["content"])
        # The IDE sent neither text nor URI: both come from the restarted server's store.
        assert f"It is saved at {uri}." in last and f"<plan>\n{plan}\n</plan>" in last
    finally:
        crashable.close()


# -- a rewind restores the plan of the kept turn ------------------------------------------------


def plan_registry(state: a.ConversationStateStructure) -> dict[str, str]:
    """ConversationStateStructure.plans as {id: path}, each entry's id equal to its key."""
    assert all(entry.id == key for key, entry in state.plans.items())
    return {key: entry.path for key, entry in state.plans.items()}


async def plan_turn(
    server: ServerProcess,
    message: a.AgentClientMessage,
    uri: str,
    state: a.ConversationStateStructure | None = None,
) -> a.ConversationStateStructure:
    """One plan-mode turn over the shim whose CreatePlan the IDE saves at `uri`; the
    checkpoint it ends with."""
    if state is not None:
        message.run_request.conversation_state.CopyFrom(state)
    async with ide(server, "shim") as (send, reader):
        await send(with_mode(message, a.AGENT_MODE_PLAN))
        asked = await reader.wait_for(query_of("create_plan_request_query"))
        result = a.CreatePlanResult(success=a.CreatePlanSuccess(), plan_uri=uri)
        response = a.CreatePlanRequestResponse(result=result)
        await send(respond(asked.interaction_query.id, create_plan_request_response=response))
        assert await reader.wait_end() == {} and reader.turn_ended
    checkpoints = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.WhichOneof("message") == "conversation_checkpoint_update"
    ]
    return checkpoints[-1]


async def test_a_build_after_a_rewind_carries_out_the_plan_of_the_kept_turn(
    qserver: ServerProcess, upstream: FakeUpstream
) -> None:
    marker = uuid.uuid4().hex[:8]
    conversation_id = str(uuid.uuid4())
    plan1 = f"{PLAN_TEXT}\n3. First draft ({marker})."
    plan2 = f"{PLAN_TEXT}\n3. Second draft ({marker})."
    uri1 = f"file:///plans/{marker}-1.plan.md"
    uri2 = f"file:///plans/{marker}-2.plan.md"
    first = run_request(tool_prompt("CreatePlan", {"plan": plan1}), conversation_id)
    after1 = await plan_turn(qserver, first, uri1)
    second = run_request(tool_prompt("CreatePlan", {"plan": plan2}), conversation_id)
    after2 = await plan_turn(qserver, second, uri2, state=after1)
    assert len(after1.turns) == 1 and len(after2.turns) == 2
    # The checkpoint carries the plan (7, a ConversationPlan) and every plan document (20).
    assert a.ConversationPlan.FromString(after1.plan).plan == plan1
    assert a.ConversationPlan.FromString(after2.plan).plan == plan2
    assert plan_registry(after1) == {f"{marker}-1": f"/plans/{marker}-1.plan.md"}
    assert plan_registry(after2) == {
        f"{marker}-1": f"/plans/{marker}-1.plan.md",
        f"{marker}-2": f"/plans/{marker}-2.plan.md",
    }

    # The user goes back to the end of turn one and presses Build there: the IDE's checkpoint
    # is turn one's, and it sends neither the plan's text nor its URI.
    build = a.ConversationAction(execute_plan_action=a.ExecutePlanAction())
    build.execute_plan_action.request_context.CopyFrom(request_context())
    message = action_request(conversation_id, build)
    message.run_request.conversation_state.CopyFrom(after1)
    async with ide(qserver, "shim") as (send, reader):
        await send(message)
        assert await reader.wait_end() == {} and reader.turn_ended
    # The rewound conversation's checkpoint is turn one's plan again, and only its document.
    (*_, rewound) = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.WhichOneof("message") == "conversation_checkpoint_update"
    ]
    assert a.ConversationPlan.FromString(rewound.plan).plan == plan1
    assert plan_registry(rewound) == {f"{marker}-1": f"/plans/{marker}-1.plan.md"}
    *_, body = chat_requests(upstream, marker)
    last = content_text(body["messages"][-1]["content"])
    assert last.startswith("The user pressed Build: carry out this plan now")
    assert f"It is saved at {uri1}." in last and f"<plan>\n{plan1}\n</plan>" in last
    assert "Second draft" not in last
    # The model sees turn one's history only: turn two's CreatePlan is outside the view.
    assert [t for t in tool_messages(body) if "The plan was saved" in t] == [
        f"The plan was saved as {uri1}. The user reviews it now and starts the work with "
        "Build; this turn ends here."
    ]
    assert tool_names(body) == AGENT_TOOLS
