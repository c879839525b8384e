"""Schema tests: committed generated code is current, field numbers are right, unknowns survive."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.proto import aiserver_pb2 as ai

REPO = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO / "src" / "cursor_byok" / "transport" / "cursor" / "proto"


def _load_gen_proto() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_proto", REPO / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- tiny hand encoder, so expected bytes come from the field numbers, not from our schema ---


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def vint(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def ld(field: int, *parts: bytes | str) -> bytes:
    payload = b"".join(p.encode() if isinstance(p, str) else p for p in parts)
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


# --- generated code is up to date ---


def test_regenerating_gives_identical_files(tmp_path: Path) -> None:
    generated = _load_gen_proto().generate(tmp_path)
    committed = sorted(p for p in PROTO_DIR.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi")))
    assert [p.name for p in generated] == [p.name for p in committed]
    assert len(committed) == 4
    for new, old in zip(generated, committed, strict=True):
        assert new.read_bytes() == old.read_bytes(), (
            f"{old.name} is stale: run scripts/gen_proto.py"
        )


def test_generated_code_is_compatible_with_runtime() -> None:
    """protobuf refuses gencode newer than the runtime; importing proves it is not."""
    from google.protobuf import __version__

    assert int(__version__.split(".")[0]) >= 7
    assert a.DESCRIPTOR.package == "agent.v1"
    assert ai.DESCRIPTOR.package == "aiserver.v1"


# --- unknown fields survive decode + re-encode ---


def test_unknown_fields_survive_round_trip() -> None:
    text_delta = ld(1, "hi") + vint(99, 7) + ld(1000, b"\x01\x02\x03")
    raw = ld(1, ld(1, text_delta)) + ld(6, ld(1, "future oneof variant"))
    msg = a.AgentServerMessage.FromString(raw)

    assert msg.interaction_update.text_delta.text == "hi"
    top = [(f.field_number, f.wire_type) for f in UnknownFieldSet(msg)]
    assert top == [(6, 2)]
    nested = [(f.field_number, f.data) for f in UnknownFieldSet(msg.interaction_update.text_delta)]
    assert nested == [(99, 7), (1000, b"\x01\x02\x03")]
    assert msg.SerializeToString() == raw
    assert msg.SerializeToString(deterministic=True) == raw

    msg.interaction_update.text_delta.text = "ho"
    assert msg.SerializeToString() == raw.replace(b"\x02hi", b"\x02ho")


def test_unknown_oneof_variant_of_client_message_is_kept() -> None:
    raw = vint(1, 5) + ld(99, b"\x08\x01")  # exec id 5, then a result variant we do not model
    exec_msg = a.ExecClientMessage.FromString(raw)
    assert exec_msg.id == 5
    assert exec_msg.WhichOneof("message") is None
    assert exec_msg.SerializeToString() == raw


# --- field numbers of the key server -> client messages ---


def test_text_delta_wire_bytes() -> None:
    msg = a.AgentServerMessage(
        interaction_update=a.InteractionUpdate(text_delta=a.TextDeltaUpdate(text="hi"))
    )
    raw = msg.SerializeToString()
    assert raw == ld(1, ld(1, ld(1, "hi")))
    assert a.AgentServerMessage.FromString(raw) == msg


def test_shell_stream_args_wire_bytes() -> None:
    args = a.ShellArgs(
        command="ls -la",
        working_directory="/w",
        timeout=30000,
        tool_call_id="tc_1",
        timeout_behavior=a.TIMEOUT_BEHAVIOR_BACKGROUND,
        hard_timeout=86400000,
        close_stdin=True,
        file_output_threshold_bytes=40000,
    )
    msg = a.AgentServerMessage(
        exec_server_message=a.ExecServerMessage(id=3, exec_id="tc_1", shell_stream_args=args)
    )
    shell = (
        ld(1, "ls -la")
        + ld(2, "/w")
        + vint(3, 30000)
        + ld(4, "tc_1")
        + vint(10, 40000)
        + vint(13, 2)
        + vint(14, 86400000)
        + vint(17, 1)
    )
    assert msg.SerializeToString() == ld(2, vint(1, 3) + ld(14, shell) + ld(15, "tc_1"))
    assert a.AgentServerMessage.FromString(msg.SerializeToString()) == msg


def test_kv_blob_args_wire_bytes() -> None:
    data = b'{"role":"system","content":"x"}'
    blob_id = hashlib.sha256(data).digest()
    get = a.AgentServerMessage(
        kv_server_message=a.KvServerMessage(id=1, get_blob_args=a.GetBlobArgs(blob_id=blob_id))
    )
    assert get.SerializeToString() == ld(4, vint(1, 1) + ld(2, ld(1, blob_id)))
    put = a.AgentServerMessage(
        kv_server_message=a.KvServerMessage(
            id=2, set_blob_args=a.SetBlobArgs(blob_id=blob_id, blob_data=data)
        )
    )
    assert put.SerializeToString() == ld(4, vint(1, 2) + ld(3, ld(1, blob_id) + ld(2, data)))


def test_turn_ended_heartbeat_checkpoint_and_abort_wire_bytes() -> None:
    usage = a.TurnEndedUpdate(
        input_tokens=10, output_tokens=20, cache_read_tokens=0, reasoning_tokens=5
    )
    ended = a.AgentServerMessage(interaction_update=a.InteractionUpdate(turn_ended=usage))
    # cache_read_tokens is `optional`, so an explicit 0 is still sent.
    assert ended.SerializeToString() == ld(
        1, ld(14, vint(1, 10) + vint(2, 20) + vint(3, 0) + vint(5, 5))
    )
    beat = a.AgentServerMessage(interaction_update=a.InteractionUpdate(heartbeat={}))
    assert beat.SerializeToString() == ld(1, ld(13))
    checkpoint = a.AgentServerMessage(
        conversation_checkpoint_update=a.ConversationStateStructure(
            root_prompt_messages_json=[b"\x01" * 32], turns=[b"\x02" * 32]
        )
    )
    assert checkpoint.SerializeToString() == ld(3, ld(1, b"\x01" * 32) + ld(8, b"\x02" * 32))
    abort = a.AgentServerMessage(
        exec_server_control_message=a.ExecServerControlMessage(abort=a.ExecServerAbort(id=4))
    )
    assert abort.SerializeToString() == ld(5, ld(1, vint(1, 4)))


def test_tool_call_completed_wire_bytes() -> None:
    tool = a.ToolCall(
        read_tool_call=a.ReadToolCall(
            args=a.ReadToolArgs(path="/a"),
            result=a.ReadToolResult(success=a.ReadToolSuccess(content="x", total_lines=1)),
        ),
        tool_call_id="tc",
        started_at_ms=1,
        completed_at_ms=2,
    )
    update = a.InteractionUpdate(
        tool_call_completed=a.ToolCallCompletedUpdate(
            call_id="c", tool_call=tool, model_call_id="m"
        )
    )
    body = ld(8, ld(1, ld(1, "/a")) + ld(2, ld(1, ld(1, "x") + vint(4, 1))))
    body += ld(57, "tc") + vint(59, 1) + vint(60, 2)
    assert update.SerializeToString() == ld(3, ld(1, "c") + ld(2, body) + ld(3, "m"))


# --- client -> server messages the server reads ---


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            a.ExecClientMessage(
                id=1,
                shell_result=a.ShellResult(
                    success=a.ShellSuccess(command="ls", exit_code=0, stdout="out")
                ),
            ),
            vint(1, 1) + ld(2, ld(1, ld(1, "ls") + ld(5, "out"))),
        ),
        (
            a.ExecClientMessage(
                id=1, shell_stream=a.ShellStream(exit=a.ShellStreamExit(code=2, cwd="/w"))
            ),
            vint(1, 1) + ld(14, ld(3, vint(1, 2) + ld(2, "/w"))),
        ),
        (
            a.ExecClientMessage(
                id=2, read_result=a.ReadResult(file_not_found=a.ReadFileNotFound(path="/x"))
            ),
            vint(1, 2) + ld(7, ld(4, ld(1, "/x"))),
        ),
        (
            a.ExecClientMessage(
                id=3,
                write_result=a.WriteResult(rejected=a.WriteRejected(path="/x", reason="no")),
            ),
            vint(1, 3) + ld(3, ld(6, ld(1, "/x") + ld(2, "no"))),
        ),
        (
            a.ExecClientMessage(
                id=4,
                delete_result=a.DeleteResult(
                    permission_denied=a.DeletePermissionDenied(path="/x")
                ),
            ),
            vint(1, 4) + ld(4, ld(4, ld(1, "/x"))),
        ),
        (
            a.ExecClientMessage(
                id=5,
                ls_result=a.LsResult(
                    success=a.LsSuccess(directory_tree_root=a.LsDirectoryTreeNode(abs_path="/"))
                ),
            ),
            vint(1, 5) + ld(8, ld(1, ld(1, ld(1, "/")))),
        ),
        (
            a.ExecClientMessage(
                id=6,
                grep_result=a.GrepResult(
                    success=a.GrepSuccess(
                        workspace_results={"/w": a.GrepUnionResult(files={"files": ["f"]})}
                    )
                ),
            ),
            vint(1, 6) + ld(5, ld(1, ld(4, ld(1, "/w") + ld(2, ld(2, ld(1, "f")))))),
        ),
        (
            a.ExecClientMessage(
                id=7,
                mcp_result=a.McpResult(
                    success=a.McpSuccess(
                        content=[a.McpToolResultContentItem(text=a.McpTextContent(text="t"))]
                    )
                ),
            ),
            vint(1, 7) + ld(11, ld(1, ld(1, ld(1, ld(1, "t"))))),
        ),
    ],
    ids=["shell_result", "shell_stream_exit", "read_not_found", "write_rejected",
         "delete_denied", "ls_success", "grep_files", "mcp_text"],
)  # fmt: skip
def test_exec_client_results_wire_bytes(message: a.ExecClientMessage, expected: bytes) -> None:
    wrapped = a.AgentClientMessage(exec_client_message=message)
    raw = ld(2, expected)
    assert wrapped.SerializeToString() == raw
    assert a.AgentClientMessage.FromString(raw) == wrapped


def test_client_control_kv_heartbeat_and_cancel_wire_bytes() -> None:
    close = a.AgentClientMessage(
        exec_client_control_message=a.ExecClientControlMessage(
            stream_close=a.ExecClientStreamClose(id=9)
        )
    )
    assert close.SerializeToString() == ld(5, ld(1, vint(1, 9)))
    kv = a.AgentClientMessage(
        kv_client_message=a.KvClientMessage(id=2, get_blob_result=a.GetBlobResult(blob_data=b"z"))
    )
    assert kv.SerializeToString() == ld(3, vint(1, 2) + ld(2, ld(1, b"z")))
    assert a.AgentClientMessage(client_heartbeat={}).SerializeToString() == ld(7)
    cancel = a.AgentClientMessage(
        conversation_action=a.ConversationAction(cancel_action=a.CancelAction(reason="user"))
    )
    assert cancel.SerializeToString() == ld(4, ld(3, ld(1, "user")))


def test_mcp_tool_definition_schema_is_a_value() -> None:
    schema = struct_pb2.Value()
    schema.struct_value.update({"type": "object"})
    tool = a.McpToolDefinition(name="srv-echo", tool_name="echo", input_schema=schema)
    raw = tool.SerializeToString()
    struct = ld(1, ld(1, "type") + ld(2, ld(3, "object")))  # Struct.fields map entry
    assert raw == ld(1, "srv-echo") + ld(3, ld(5, struct)) + ld(5, "echo")


def test_bidi_append_request_wire_bytes() -> None:
    inner = a.AgentClientMessage(client_heartbeat={}).SerializeToString()
    req = ai.BidiAppendRequest(
        data=inner.hex(),
        request_id=ai.BidiRequestId(request_id="r"),
        append_seqno=3,
        data_binary=inner,
    )
    assert req.SerializeToString() == ld(1, inner.hex()) + ld(2, ld(1, "r")) + vint(3, 3) + ld(
        4, inner
    )


def test_error_details_wire_bytes() -> None:
    details = ai.ErrorDetails(
        error=ai.ErrorDetails.ERROR_PROVIDER_ERROR,
        details=ai.CustomErrorDetails(title="Server Error", detail="d", is_retryable=True),
        is_expected=False,
    )
    expected = vint(1, 57) + ld(2, ld(1, "Server Error") + ld(2, "d") + vint(4, 1)) + vint(3, 0)
    assert details.SerializeToString() == expected


def test_service_paths_and_stream_kinds() -> None:
    agent = a.DESCRIPTOR.services_by_name["AgentService"].methods_by_name
    assert agent["Run"].client_streaming and agent["Run"].server_streaming
    assert not agent["RunSSE"].client_streaming and agent["RunSSE"].server_streaming
    assert agent["RunSSE"].input_type.full_name == "agent.v1.BidiRequestId"
    paths = {
        f"/{svc.full_name}/{m.name}"
        for mod in (a, ai)
        for svc in mod.DESCRIPTOR.services_by_name.values()
        for m in svc.methods
    }
    assert {
        "/agent.v1.AgentService/Run",
        "/agent.v1.AgentService/RunSSE",
        "/agent.v1.AgentService/NameAgent",
        "/agent.v1.AgentService/GetUsableModels",
        "/agent.v1.AgentService/GetDefaultModelForCli",
        "/aiserver.v1.BidiService/BidiAppend",
        "/aiserver.v1.AiService/GetUsableModels",
        "/aiserver.v1.AiService/GetDefaultModelForCli",
        "/aiserver.v1.AiService/AvailableModels",
        "/aiserver.v1.AiService/GetServerConfig",
        "/aiserver.v1.ServerConfigService/GetServerConfig",
        "/aiserver.v1.DashboardService/GetMe",
        "/aiserver.v1.DashboardService/GetUserPrivacyMode",
    } <= paths


# --- malformed input ---


def test_malformed_input_raises_clean_errors() -> None:
    good = a.AgentClientMessage(
        conversation_action=a.ConversationAction(cancel_action=a.CancelAction(reason="stop"))
    ).SerializeToString()
    with pytest.raises(ValueError):
        bytes.fromhex("0a0zz")
    for bad in (good[:-2], b"\x0a\x10\x01", b"\x0f", b"\x0a"):
        with pytest.raises(DecodeError):
            a.AgentClientMessage.FromString(bad)
