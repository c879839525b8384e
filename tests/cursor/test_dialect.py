"""The Cursor dialect: real IDE captures decode into the facts INDEX.md lists, every client
message kind decodes to its native value, and every encoded server message keeps its ids and
fields through a protobuf round trip."""

from __future__ import annotations

import hashlib
import json

import pytest

from cursor_byok.llm.events import (
    DoneEvent,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from cursor_byok.llm.types import AssistantMessage, ImageContent, TextContent, ToolCall, Usage
from cursor_byok.loop import render_tools
from cursor_byok.loop.catalogue import Switches
from cursor_byok.transport import cursor as d
from cursor_byok.transport.cursor import decode, encode, values
from cursor_byok.transport.cursor.decode import ExecControl, ExecReply, KvReply
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.proto import aiserver_pb2 as ai
from tests.paths import CURSOR_FIXTURES

FIXTURES = CURSOR_FIXTURES
CONVERSATION = "7d302826-58c8-44df-bd26-9471bea65c4e"
WORKSPACE = "/Users/leokun/Documents/cursor-byok"

# INDEX.md per-file table: text, mode, root prompt blobs, turns.
CAPTURES = {
    "agent": ("你好agent", "agent", 133, 40),
    "ask": ("你好ask", "ask", 135, 41),
    "plan": ("你好", "plan", 129, 38),
    "debug": ("那么mark fix的 ui是什么唤起的？", "debug", 106, 36),
    "multitask": ("你好123", "multitask", 131, 39),
}


def _capture(name: str) -> a.AgentClientMessage:
    record = json.loads((FIXTURES / f"ide-run-request-{name}.jsonl").read_text(encoding="utf-8"))
    return a.AgentClientMessage.FromString(bytes.fromhex(record["bidi_append_request"]["data"]))


def _roundtrip(frame: bytes) -> a.AgentServerMessage:
    return a.AgentServerMessage.FromString(frame)


# -- the real IDE captures -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_decodes_into_index_facts(name: str) -> None:
    text, mode, roots, turns = CAPTURES[name]
    event = decode.decode_client_message(_capture(name))
    assert isinstance(event, d.RunRequested)
    r = event.request
    assert r.conversation_id == CONVERSATION
    assert r.model_id == "grok-4.6"
    assert r.action == "user_message_action"
    assert r.mode == mode
    assert r.user_message is not None
    # The typed text is the last text part; the IDE's visible file comes before it.
    assert r.user_message.content[-1] == TextContent(text=text)
    assert "Files open in the user's editor" in r.user_message.text
    assert [(c.kind, c.byte_length) for c in r.context_refs] == [
        ("rules", 1114),
        ("skills", 5221),
        ("subagents", 159),
        ("mcps", 28434),
    ]
    assert all(len(c.blob_id) == 32 for c in r.context_refs)
    assert len(r.history.root_prompt_blob_ids) == roots
    assert len(r.history.turn_blob_ids) == turns
    assert all(len(b) == 32 for b in r.history.root_prompt_blob_ids)
    assert r.inline_history == ()
    assert r.mcp_tools == ()
    assert r.custom_system_prompt is None
    # dynamic_context (request_context_parts.9) is the inline context.
    assert r.inline_context is not None and r.inline_context.environment is not None
    assert r.inline_context.environment.os == "darwin 25.5.0"


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_capture_context_merges_env_and_git(name: str) -> None:
    r = decode.decode_run_request(_capture(name).run_request)
    context = d.merge_context(r.inline_context, [], r.mcp_tools, mode=r.mode)
    env = context.environment
    assert env.os == "darwin 25.5.0"
    assert env.shell == "zsh"
    assert env.workspace_paths == (WORKSPACE,)
    assert env.cwd == WORKSPACE
    assert env.time_zone == "Asia/Shanghai"
    assert context.git is not None
    assert context.git.startswith(
        f"Repository {WORKSPACE} (branch refactor/0.1.0-beta, "
        "remote git@github.com:leookun/cursor-byok.git)"
    )
    assert len(context.git) <= 4000 + 100
    assert context.rules == ()  # rules come only by blob in these frames
    assert context.mode == r.mode
    assert context.mcp_tools == () and context.mcp_routes == ()


def test_capture_state_mode_is_not_the_message_mode() -> None:
    # agent frame: UserMessage.mode AGENT, conversation_state.mode MULTITASK.
    r = decode.decode_run_request(_capture("agent").run_request)
    assert r.mode == "agent"


# -- run_request variants ------------------------------------------------------------------------


def _run_request(**kw: object) -> a.AgentRunRequest:
    req = a.AgentRunRequest(conversation_id="conv-1")
    req.action.user_message_action.user_message.text = "hello"
    for key, value in kw.items():
        setattr(req, key, value)
    return req


def test_model_id_prefers_requested_model() -> None:
    req = _run_request()
    req.model_details.model_id = "old"
    assert decode.decode_run_request(req).model_id == "old"
    req.requested_model.model_id = "new"
    assert decode.decode_run_request(req).model_id == "new"
    assert decode.decode_run_request(_run_request()).model_id is None


def test_missing_conversation_id_is_a_dialect_error() -> None:
    req = _run_request()
    req.ClearField("conversation_id")
    with pytest.raises(d.DialectError, match="conversation_id"):
        decode.decode_run_request(req)


def test_every_action_decodes_and_only_an_empty_one_is_an_error() -> None:
    req = a.AgentRunRequest(conversation_id="c")
    req.action.cancel_action.reason = "stop"
    r = decode.decode_run_request(req)
    assert r.action == "cancel_action" and r.payload == values.CancelTurn(reason="stop")
    req = a.AgentRunRequest(conversation_id="c")
    req.action.summarize_action.SetInParent()
    assert decode.decode_run_request(req).action == "summarize_action"
    with pytest.raises(d.DialectError, match="no action"):
        decode.decode_run_request(a.AgentRunRequest(conversation_id="c"))


def test_resume_action_with_context() -> None:
    req = a.AgentRunRequest(conversation_id="c")
    req.action.resume_action.request_context.env.shell = "bash"
    req.conversation_state.mode = a.AGENT_MODE_PLAN
    r = decode.decode_run_request(req)
    assert r.action == "resume_action"
    assert r.user_message is None
    assert r.inline_context is not None and r.inline_context.environment is not None
    assert r.inline_context.environment.shell == "bash"
    assert r.mode == "plan"


def test_inline_request_context_images_and_mcp_tools() -> None:
    req = _run_request()
    uma = req.action.user_message_action
    uma.request_context.rules.add(full_path="/r.mdc", content="Be brief.")
    uma.user_message.mode = a.AGENT_MODE_ASK
    img = uma.user_message.selected_context.selected_images.add(mime_type="image/jpeg")
    img.blob_id_with_data.blob_id = b"\x01" * 32
    img.blob_id_with_data.data = b"\xff\xd8jpeg"
    img2 = uma.user_message.selected_context.selected_images.add(path="/x.png")
    img2.blob_id = b"\x02" * 32
    uma.user_message.selected_context.files.add(path="/w/a.py", relative_path="a.py", content="x=1")
    req.mcp_tools.mcp_tools.add(name="t", tool_name="t", provider_identifier="srv")
    r = decode.decode_run_request(req)
    assert r.mode == "ask"
    assert r.inline_context is not None
    assert r.inline_context.rules == ("Rule from /r.mdc:\nBe brief.",)
    assert r.user_message is not None
    content = r.user_message.content
    assert content[0] == TextContent(text="Attached file a.py:\n```\nx=1\n```")
    assert content[1] == TextContent(text="hello")
    assert "not sent to this server: /x.png" in content[2].text  # type: ignore[union-attr]
    assert content[3] == ImageContent(data="/9hqcGVn", mime_type="image/jpeg")
    assert [t.name for t in r.mcp_tools] == ["t"]


def test_text_only_in_a_blob_is_a_clear_error() -> None:
    req = _run_request()
    um = req.action.user_message_action.user_message
    um.text = ""
    um.text_blob_id = b"\x03" * 32
    with pytest.raises(d.DialectError, match="text_blob_id"):
        decode.decode_run_request(req)


def test_inline_conversation_history_is_decoded() -> None:
    req = _run_request()
    history = req.action.user_message_action.conversation_history
    history.messages.add().user.content.add().text.text = "earlier"
    history.messages.add().assistant.content.add().text.text = "answer"
    r = decode.decode_run_request(req)
    assert [type(m).__name__ for m in r.inline_history] == ["UserMessage", "AssistantMessage"]
    assert r.inline_history[1].text == "answer"  # type: ignore[union-attr]


def test_empty_subagents_blob_is_not_a_ref() -> None:
    req = _run_request()
    parts = req.action.request_context_parts
    parts.subagents_blob_id = hashlib.sha256(b"").digest()
    parts.rules_blob_id = b"\x09" * 32
    parts.rules_byte_length = 7
    r = decode.decode_run_request(req)
    assert r.context_refs == (d.ContextRef("rules", b"\x09" * 32, 7),)
    assert r.inline_context is None


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (0, "agent"),
        (1, "agent"),
        (2, "ask"),
        (3, "plan"),
        (4, "debug"),
        (7, "multitask"),
        (8, "custom"),
        (99, "mode_99"),
    ],
)
def test_mode_names(value: int, name: str) -> None:
    assert decode.mode_name(value) == name


# -- every client message kind -------------------------------------------------------------------


def test_decode_every_client_message_kind() -> None:
    exec_msg = a.ExecClientMessage(id=4)
    exec_msg.read_result.success.content = "x"
    ev = decode.decode_client_message(a.AgentClientMessage(exec_client_message=exec_msg))
    assert ev == ExecReply(id=4, message=exec_msg)

    for kind in ("stream_close", "heartbeat"):
        control = a.ExecClientControlMessage()
        getattr(control, kind).id = 5
        ev = decode.decode_client_message(a.AgentClientMessage(exec_client_control_message=control))
        assert ev == ExecControl(id=5, kind=kind, message=control, error=None)

    control = a.ExecClientControlMessage(
        throw=a.ExecClientThrow(id=6, error="No handler", error_code="no_handler")
    )
    ev = decode.decode_client_message(a.AgentClientMessage(exec_client_control_message=control))
    assert isinstance(ev, ExecControl)
    assert (ev.id, ev.kind, ev.error) == (6, "throw", "No handler (no_handler)")

    kv = a.KvClientMessage(id=2, get_blob_result=a.GetBlobResult(blob_data=b"data"))
    ev = decode.decode_client_message(a.AgentClientMessage(kv_client_message=kv))
    assert isinstance(ev, KvReply) and ev.id == 2
    assert d.ClientLink(conversation_id="c", now_ms=lambda: 0).receive(
        a.AgentClientMessage(kv_client_message=kv)
    ) == d.BlobReceived(kv_id=2, data=b"data")

    action = a.ConversationAction(cancel_action=a.CancelAction(reason="user stop"))
    ev = decode.decode_client_message(a.AgentClientMessage(conversation_action=action))
    assert ev == d.CancelRequested(reason="user stop")

    action = a.ConversationAction()
    action.user_message_action.user_message.text = "more"
    action.user_message_action.user_message.mode = a.AGENT_MODE_PLAN
    action.request_context_parts.dynamic_context.env.shell = "fish"
    ev = decode.decode_client_message(a.AgentClientMessage(conversation_action=action))
    assert isinstance(ev, d.FollowUp)
    assert ev.message.text == "more" and ev.mode == "plan"
    assert ev.context is not None and ev.context.environment is not None
    assert ev.context.environment.shell == "fish"

    action = a.ConversationAction(resume_action=a.ResumeAction())
    assert decode.decode_client_message(a.AgentClientMessage(conversation_action=action)) == (
        d.ResumeRequested()
    )
    action = a.ConversationAction(summarize_action=a.SummarizeAction())
    assert decode.decode_client_message(a.AgentClientMessage(conversation_action=action)) == (
        d.UnknownEvent(kind="conversation_action.summarize_action")
    )

    response = a.InteractionResponse(id=9)
    response.web_search_request_response.approved.SetInParent()
    ev = decode.decode_client_message(a.AgentClientMessage(interaction_response=response))
    assert ev == d.InteractionAnswered(
        id=9, kind="web_search_request_response", fields={"approved": {}}
    )

    ev = decode.decode_client_message(a.AgentClientMessage(client_heartbeat=a.ClientHeartbeat()))
    assert ev == d.ClientHeartbeat()
    ev = decode.decode_client_message(a.AgentClientMessage(prewarm_request=a.PrewarmRequest()))
    assert ev == d.UnknownEvent(kind="prewarm_request")


def test_client_messages_survive_the_wire() -> None:
    """protobuf bytes → decode → the same ids and payloads as the message built in memory."""
    control = a.ExecClientControlMessage(throw=a.ExecClientThrow(id=11, error="boom"))
    wire = a.AgentClientMessage(exec_client_control_message=control).SerializeToString()
    ev = decode.decode_client_message(a.AgentClientMessage.FromString(wire))
    assert isinstance(ev, ExecControl) and (ev.id, ev.error) == (11, "boom")
    shell = a.ExecClientMessage(id=12)
    shell.shell_result.success.exit_code = 3
    wire = a.AgentClientMessage(exec_client_message=shell).SerializeToString()
    ev = decode.decode_client_message(a.AgentClientMessage.FromString(wire))
    assert isinstance(ev, ExecReply) and ev.message.shell_result.success.exit_code == 3


def test_empty_messages_are_dialect_errors() -> None:
    with pytest.raises(d.DialectError, match="empty"):
        decode.decode_client_message(a.AgentClientMessage())
    with pytest.raises(d.DialectError, match="no message"):
        decode.decode_client_message(
            a.AgentClientMessage(exec_client_control_message=a.ExecClientControlMessage())
        )
    action = a.ConversationAction()
    action.user_message_action.SetInParent()
    with pytest.raises(d.DialectError, match="no user_message"):
        decode.decode_client_message(a.AgentClientMessage(conversation_action=action))


def test_dialect_error_is_a_value_error() -> None:
    assert issubclass(d.DialectError, ValueError)


# -- blobs and request context -------------------------------------------------------------------


def test_blob_messages_round_trip() -> None:
    msg = _roundtrip(encode.get_blob(3, b"\x07" * 32))
    assert msg.kv_server_message.id == 3
    assert msg.kv_server_message.get_blob_args.blob_id == b"\x07" * 32
    msg = _roundtrip(encode.set_blob(4, b"payload"))
    assert msg.kv_server_message.id == 4
    assert msg.kv_server_message.set_blob_args.blob_id == hashlib.sha256(b"payload").digest()
    assert msg.kv_server_message.set_blob_args.blob_data == b"payload"


def _kv(message: a.KvClientMessage) -> object:
    link = d.ClientLink(conversation_id="c", now_ms=lambda: 0)
    return link.receive(a.AgentClientMessage(kv_client_message=message))


def test_blob_data_missing_or_error_is_none() -> None:
    empty = a.KvClientMessage(id=1, get_blob_result=a.GetBlobResult())
    assert _kv(empty) == d.BlobReceived(kv_id=1, data=None)
    err = a.GetBlobResult(blob_data=b"x", error=a.Error(message="gone"))
    assert _kv(a.KvClientMessage(id=1, get_blob_result=err)) == d.BlobReceived(
        kv_id=1, data=None, error="gone"
    )
    long_err = a.GetBlobResult(error=a.Error(message="x" * 1000))
    assert _kv(a.KvClientMessage(id=1, get_blob_result=long_err)) == d.BlobReceived(
        kv_id=1, data=None, error="x" * 200
    )
    forged = a.GetBlobResult(error=a.Error(message="gone\nINFO fake line\x1b[31m"))
    assert _kv(a.KvClientMessage(id=1, get_blob_result=forged)) == d.BlobReceived(
        kv_id=1, data=None, error="gone INFO fake line [31m"
    )
    no_message = a.GetBlobResult(error=a.Error())
    assert _kv(a.KvClientMessage(id=1, get_blob_result=no_message)) == d.BlobReceived(
        kv_id=1, data=None, error="no message"
    )
    set_reply = a.KvClientMessage(id=1, set_blob_result=a.SetBlobResult())
    assert _kv(set_reply) == d.BlobStored(kv_id=1, ok=True)
    set_failed = a.KvClientMessage(id=1, set_blob_result=a.SetBlobResult(error=a.Error()))
    assert _kv(set_failed) == d.BlobStored(kv_id=1, ok=False)
    zero = a.KvClientMessage(id=1, get_blob_result=a.GetBlobResult(blob_data=b""))
    assert _kv(zero) == d.BlobReceived(kv_id=1, data=b"")
    assert isinstance(_kv(a.KvClientMessage(id=1)), d.Stray)


def test_request_context_exec_and_reply() -> None:
    link = d.ClientLink(conversation_id="c", now_ms=lambda: 0)
    exec_id, frame = link.request_context()
    msg = _roundtrip(frame)
    assert msg.exec_server_message.id == exec_id == 1
    assert msg.exec_server_message.WhichOneof("message") == "request_context_args"
    reply = a.ExecClientMessage(id=exec_id)
    reply.request_context_result.success.request_context.rules.add(content="rule")
    got = link.receive(a.AgentClientMessage(exec_client_message=reply))
    assert isinstance(got, d.ContextReceived) and got.exec_id == exec_id
    assert got.context is not None and got.context.rules == ("rule",)
    # Answered once: the same reply again waits on nothing.
    assert isinstance(link.receive(a.AgentClientMessage(exec_client_message=reply)), d.Stray)
    for build in ("error", "rejected", "throw"):
        exec_id, _ = link.request_context()
        if build == "throw":
            throw = a.ExecClientControlMessage(throw=a.ExecClientThrow(id=exec_id, error="x"))
            got = link.receive(a.AgentClientMessage(exec_client_control_message=throw))
        else:
            bad = a.ExecClientMessage(id=exec_id)
            if build == "error":
                bad.request_context_result.error.error = "nope"
            else:
                bad.request_context_result.rejected.reason = "no"
            got = link.receive(a.AgentClientMessage(exec_client_message=bad))
        assert got == d.ContextReceived(exec_id=exec_id, context=None), build


# -- the stream encoder --------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000

    def __call__(self) -> int:
        return self.t


def _only(frame: bytes | None) -> a.InteractionUpdate:
    assert frame is not None
    return _roundtrip(frame).interaction_update


def test_encoder_text_and_thinking() -> None:
    clock = Clock()
    enc = d.StreamEncoder(model_call_id="conv:1:llm1", now_ms=clock)
    assert enc.encode(StartEvent()) is None
    assert enc.encode(ThinkingStart(content_index=0)) is None
    assert _only(enc.encode(ThinkingDelta(content_index=0, delta="hmm"))).thinking_delta.text == (
        "hmm"
    )
    clock.t = 1750
    done = _only(enc.encode(ThinkingEnd(content_index=0, content="hmm")))
    assert done.thinking_completed.thinking_duration_ms == 750
    assert enc.encode(TextStart(content_index=1)) is None
    assert _only(enc.encode(TextDelta(content_index=1, delta="Hi"))).text_delta.text == "Hi"
    assert enc.encode(TextDelta(content_index=1, delta="")) is None
    assert enc.encode(TextEnd(content_index=1, content="Hi")) is None
    final = AssistantMessage(content=(), api="x", provider="x", model="m")
    assert enc.encode(DoneEvent(reason="stop", message=final)) is None


def test_encoder_tool_call_partials_keep_three_distinct_ids() -> None:
    enc = d.StreamEncoder(model_call_id="conv:1:llm2", now_ms=Clock())
    start = _only(enc.encode(ToolCallStart(content_index=2, id="toolu|01", name="Read")))
    p = start.partial_tool_call
    assert p.call_id == encode.call_id_for("conv:1:llm2", 2) == "conv_1_llm2-2"
    assert p.model_call_id == "conv:1:llm2"
    assert p.tool_call.WhichOneof("tool") == "read_tool_call"
    assert p.tool_call.tool_call_id.startswith("toolu_01_")
    assert len({p.call_id, p.model_call_id, p.tool_call.tool_call_id}) == 3
    delta = _only(enc.encode(ToolCallDelta(content_index=2, delta='{"path":')))
    assert delta.partial_tool_call.args_text_delta == '{"path":'
    assert delta.partial_tool_call.call_id == p.call_id
    call = ToolCall(id="toolu|01", name="Read", arguments={"path": "a"})
    assert enc.encode(ToolCallEnd(content_index=2, tool_call=call)) is None


@pytest.mark.parametrize(
    ("name", "variant"),
    [
        ("Shell", "shell_tool_call"),
        ("Read", "read_tool_call"),
        ("Write", "edit_tool_call"),
        ("StrReplace", "edit_tool_call"),
        ("Delete", "delete_tool_call"),
        ("LS", "ls_tool_call"),
        ("Grep", "grep_tool_call"),
        ("Glob", "glob_tool_call"),
        ("TodoWrite", "update_todos_tool_call"),
        ("get_weather", "mcp_tool_call"),
    ],
)
def test_encoder_placeholder_variant_per_tool(name: str, variant: str) -> None:
    enc = d.StreamEncoder(model_call_id="m", now_ms=Clock())
    update = _only(enc.encode(ToolCallStart(content_index=0, id="c1", name=name)))
    assert update.partial_tool_call.tool_call.WhichOneof("tool") == variant
    assert update.partial_tool_call.tool_call.tool_call_id == "c1"


def test_turn_ended_and_heartbeat() -> None:
    usage = Usage(input=10, output=20, cache_read=30, cache_write=40, reasoning=5)
    te = _roundtrip(d.turn_ended(usage)).interaction_update.turn_ended
    assert (
        te.input_tokens,
        te.output_tokens,
        te.cache_read_tokens,
        te.cache_write_tokens,
        te.reasoning_tokens,
    ) == (10, 20, 30, 40, 5)
    assert te.HasField("input_tokens")
    hb = _roundtrip(d.HEARTBEAT)
    assert hb.interaction_update.WhichOneof("message") == "heartbeat"


# -- stream endings ------------------------------------------------------------------------------


def _details(end: object) -> ai.ErrorDetails:
    assert isinstance(end, d.Ending)
    return ai.ErrorDetails.FromString(end.details)


def test_provider_error_end() -> None:
    end = d.provider_error_end("HTTP 529 overloaded")
    assert (end.code, end.message) == ("unavailable", "HTTP 529 overloaded")
    details = _details(end)
    assert details.error == ai.ErrorDetails.ERROR_PROVIDER_ERROR
    assert details.details.title == "Provider error"
    assert details.details.detail == "HTTP 529 overloaded"
    assert details.details.is_retryable is True
    assert details.HasField("is_expected") and details.is_expected is False


def test_other_ends() -> None:
    end = d.canceled_end("canceled by the user")
    assert (end.code, end.message) == ("canceled", "canceled by the user")
    assert _details(end).error == ai.ErrorDetails.ERROR_USER_ABORTED_REQUEST
    end = d.bad_request_end("unknown model 'x'; this server offers: a, b")
    assert end.code == "invalid_argument"
    assert _details(end).error == ai.ErrorDetails.ERROR_BAD_MODEL_NAME
    assert "a, b" in _details(end).details.detail
    end = d.bad_request_end("the first message of a run must be a run_request")
    assert _details(end).error == ai.ErrorDetails.ERROR_BAD_REQUEST
    end = d.internal_end("storage error")
    assert end.code == "internal"
    assert _details(end).error == ai.ErrorDetails.ERROR_INTERNAL


def test_unavailable_end() -> None:
    end = d.unavailable_end("the server's storage is busy; try again", "Server storage busy")
    assert (end.code, end.message) == ("unavailable", "the server's storage is busy; try again")
    details = _details(end)
    assert details.error == ai.ErrorDetails.ERROR_INTERNAL
    assert details.details.title == "Server storage busy"
    assert details.details.detail == end.message and details.details.is_retryable is True


def test_action_payloads_and_modes_decode() -> None:
    req = a.AgentRunRequest(conversation_id="c", subagent_type_name="explore")
    req.suppress_subagent_progress_update_tool = True
    req.action.user_message_action.user_message.text = "child"
    r = decode.decode_run_request(req)
    assert r.mode == "subagent" and r.suppress_subagent_progress_update_tool is True
    req = a.AgentRunRequest(conversation_id="c")
    epa = req.action.execute_plan_action
    epa.plan.plan = "from the plan field"
    epa.execution_mode = a.AGENT_MODE_DEBUG
    epa.plan_id = "p1"
    epa.request_context.env.shell = "zsh"
    r = decode.decode_run_request(req)
    assert r.action == "execute_plan_action" and r.mode == "debug" and r.user_message is None
    assert r.payload == values.ExecutePlan(
        plan_text="from the plan field", plan_id="p1", execution_mode="debug"
    )
    assert r.inline_context is not None and r.inline_context.environment is not None
    assert r.inline_context.environment.shell == "zsh"
    req = a.AgentRunRequest(conversation_id="c")
    req.action.start_plan_action.user_message.text = "plan it"
    r = decode.decode_run_request(req)
    assert r.mode == "plan" and r.user_text == "plan it" and r.payload == values.StartPlan()
    req = a.AgentRunRequest(conversation_id="c")
    c = req.action.background_task_completion_action.completions.add()
    c.task_id, c.kind, c.status = (
        "t",
        a.BACKGROUND_TASK_KIND_SUBAGENT,
        a.BACKGROUND_TASK_STATUS_ERROR,
    )
    c.reason = a.BACKGROUND_TASK_COMPLETION_REASON_TASK_PROGRESS
    r = decode.decode_run_request(req)
    assert r.payload == values.BackgroundCompletions(
        completions=(
            values.BackgroundCompletion(
                task_id="t",
                kind=values.BackgroundTaskKind.SUBAGENT,
                status=values.BackgroundTaskStatus.ERROR,
                finished=False,
            ),
        )
    )
    req = a.AgentRunRequest(conversation_id="c")
    req.action.inject_context_action.injection_id = "i1"
    req.action.inject_context_action.system_context.producer = "bot"
    req.action.inject_context_action.system_context.content = "x" * 60_000
    r = decode.decode_run_request(a.AgentRunRequest.FromString(req.SerializeToString()))
    assert isinstance(r.payload, values.InjectContext) and r.payload.injection_id == "i1"
    assert r.user_message is not None and "Context injected by bot" in r.user_message.text
    assert "x" * 50_000 in r.user_text and "x" * 50_001 not in r.user_text  # bounded
    # A variant newer than the schema (field 21 set, unknown here): its own action, no error.
    req = a.AgentRunRequest(conversation_id="c")
    req.action.MergeFromString(bytes([0xAA, 0x01, 0x00]))
    r = decode.decode_run_request(a.AgentRunRequest.FromString(req.SerializeToString()))
    assert r.action is values.RunAction.UNKNOWN
    assert r.payload == values.UnknownAction(field_numbers=(21,))


def test_request_context_tool_flags_reach_the_turn_context() -> None:
    rc = a.RequestContext(web_search_enabled=True, read_lints_enabled=False)
    ctx = d.merge_context(
        decode.decode_request_context(rc),
        (),
        (),
        mode="agent",
        suppress_subagent_progress_update_tool=True,
        disabled_tools=("Delete",),
    )
    assert ctx.switches == Switches(
        web_search_enabled=True,
        read_lints_enabled=False,
        suppress_subagent_progress_update_tool=True,
        disabled_tools=("Delete",),
    )
    assert "Delete" not in [t.name for t in render_tools(ctx)]


@pytest.mark.parametrize(
    ("uri", "path", "plan_id"),
    [
        (
            "file:///w/.cursor/plans/loader-cache_1a2b.plan.md",
            "/w/.cursor/plans/loader-cache_1a2b.plan.md",
            "loader-cache_1a2b",
        ),
        ("file:///C:/Users/me/plans/My%20Plan.md", "/C:/Users/me/plans/My Plan.md", "My Plan"),
        ("untitled:plan-3", "untitled:plan-3", "untitled:plan-3"),
        ("file:///plans/.plan.md", "/plans/.plan.md", ".plan"),
    ],
)
def test_plan_registry_ids_and_paths(uri: str, path: str, plan_id: str) -> None:
    from cursor_byok.transport.cursor import encode

    assert (encode.plan_path(uri), encode.plan_id(uri)) == (path, plan_id)
