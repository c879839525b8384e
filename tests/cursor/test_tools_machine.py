"""What every tool machine shares: the table of machines, exec control messages, the explicit
`Ignored` answers, the phase after each event, aborting and local completion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.llm.types import TextContent, ToolCall, ToolResultMessage
from cursor_byok.loop.tools import NATIVE_TOOL_NAMES
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import (
    NATIVE_MACHINES,
    Finished,
    Ignored,
    McpMachine,
    Phase,
    Send,
    ToolMachine,
    machine_for,
    placeholder_tool_call,
    sanitize_tool_call_id,
)
from cursor_byok.transport.cursor.tools.await_shell import AwaitShellMachine
from cursor_byok.transport.cursor.tools.files import (
    DeleteMachine,
    LsMachine,
    ReadMachine,
    StrReplaceMachine,
    WriteMachine,
)
from cursor_byok.transport.cursor.tools.lints import ReadLintsMachine
from cursor_byok.transport.cursor.tools.mcp_meta import (
    CallMcpToolMachine,
    FetchMcpResourceMachine,
    GetMcpToolsMachine,
    ListMcpResourcesMachine,
)
from cursor_byok.transport.cursor.tools.notebook import EditNotebookMachine
from cursor_byok.transport.cursor.tools.queries import (
    AskQuestionMachine,
    CreatePlanMachine,
    SwitchModeMachine,
)
from cursor_byok.transport.cursor.tools.search import GlobMachine, GrepMachine
from cursor_byok.transport.cursor.tools.shell import ShellMachine
from cursor_byok.transport.cursor.tools.stdin import WriteShellStdinMachine
from cursor_byok.transport.cursor.tools.subagents import TaskMachine, UpdateCurrentStepMachine
from cursor_byok.transport.cursor.tools.todos import TodoWriteMachine
from cursor_byok.transport.cursor.tools.web import GenerateImageMachine, WebFetchMachine
from cursor_byok.transport.cursor.tools.web_search import WebSearchMachine
from tests.cursor.tool_support import (
    T0,
    Ids,
    begin,
    close,
    completed,
    completed_card,
    decode,
    esm,
    finished,
    heartbeat,
    ignored,
    machine,
    reply,
    start,
)

TOOL_ARGS: dict[str, dict[str, Any]] = {
    "Shell": {"command": "x"},
    "Read": {"path": "f", "offset": 2, "limit": 1},
    "Write": {"path": "f", "contents": "c"},
    "StrReplace": {"path": "f", "old_string": "a", "new_string": "b"},
    "Delete": {"path": "f"},
    "LS": {"path": "."},
    "Grep": {"pattern": "p"},
    "Glob": {"glob_pattern": "*"},
    "ReadLints": {"paths": ["f"]},
    "WriteShellStdin": {"shell_id": "3", "chars": "y\n"},
    "EditNotebook": {
        "target_notebook": "n.ipynb",
        "cell_idx": 0,
        "is_new_cell": True,
        "new_string": "x",
    },
    "some_mcp": {"k": [1, {"v": None}]},
    "FetchMcpResource": {"server": "s", "uri": "u://x"},
    "ListMcpResources": {"server": "s"},
    "Task": {"description": "d", "prompt": "p"},
}
REPLY_KINDS = [f.name for f in a.ExecClientMessage.DESCRIPTOR.oneofs_by_name["message"].fields]


def _throw(exec_id: int, **fields: Any) -> a.ExecClientControlMessage:
    return a.ExecClientControlMessage(throw=a.ExecClientThrow(id=exec_id, **fields))


def _result(name: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id="toolu_1", tool_name=name, content=(TextContent(text=text),), is_error=True
    )


# -- the table -----------------------------------------------------------------------------------


def test_the_table_covers_exactly_the_native_tools_in_catalogue_order() -> None:
    assert tuple(NATIVE_MACHINES) == NATIVE_TOOL_NAMES
    assert dict(NATIVE_MACHINES) == {
        "Shell": ShellMachine,
        "Read": ReadMachine,
        "Write": WriteMachine,
        "StrReplace": StrReplaceMachine,
        "Delete": DeleteMachine,
        "LS": LsMachine,
        "Grep": GrepMachine,
        "Glob": GlobMachine,
        "AwaitShell": AwaitShellMachine,
        "WriteShellStdin": WriteShellStdinMachine,
        "TodoWrite": TodoWriteMachine,
        "ReadLints": ReadLintsMachine,
        "EditNotebook": EditNotebookMachine,
        "CreatePlan": CreatePlanMachine,
        "AskQuestion": AskQuestionMachine,
        "SwitchMode": SwitchModeMachine,
        "Task": TaskMachine,
        "UpdateCurrentStep": UpdateCurrentStepMachine,
        "WebSearch": WebSearchMachine,
        "WebFetch": WebFetchMachine,
        "GenerateImage": GenerateImageMachine,
        "GetMcpTools": GetMcpToolsMachine,
        "CallMcpTool": CallMcpToolMachine,
        "FetchMcpResource": FetchMcpResourceMachine,
        "ListMcpResources": ListMcpResourcesMachine,
    }


@pytest.mark.parametrize("name", sorted(TOOL_ARGS))
def test_machine_for_picks_the_family_by_name(name: str) -> None:
    tool = machine(name, TOOL_ARGS[name])
    assert type(tool) is NATIVE_MACHINES.get(name, McpMachine)
    assert (tool.call_id, tool.model_call_id) == ("llm1-0", "conv:1:llm1")
    assert tool.tool_call.name == name and tool.phase is Phase.NEW
    assert tool.exec_ids == frozenset()


def test_machine_for_passes_the_conversation_and_the_shell_block_time() -> None:
    tool = machine_for(
        ToolCall(id="toolu_1", name="Shell", arguments={"command": "x"}),
        call_id="c",
        model_call_id="m",
        conversation_id="conv-9",
        shell_block_ms=7_000,
    )
    args = esm(decode(tool.start(Ids(), T0).frames)).shell_stream_args
    assert (args.conversation_id, args.timeout) == ("conv-9", 7_000)


def test_names_are_case_sensitive_and_unknown_names_are_mcp() -> None:
    assert isinstance(machine("shell", {"command": "x"}), McpMachine)
    assert isinstance(machine("Bash", {}), McpMachine)


def test_placeholder_tool_call_per_family() -> None:
    variants = {
        "Shell": "shell_tool_call",
        "Read": "read_tool_call",
        "Write": "edit_tool_call",
        "StrReplace": "edit_tool_call",
        "Delete": "delete_tool_call",
        "LS": "ls_tool_call",
        "Grep": "grep_tool_call",
        "Glob": "glob_tool_call",
        "TodoWrite": "update_todos_tool_call",
        "ReadLints": "read_lints_tool_call",
        "EditNotebook": "edit_tool_call",
        "my_mcp": "mcp_tool_call",
    }
    for name, variant in variants.items():
        tc = placeholder_tool_call(name, "call|1")
        assert tc.WhichOneof("tool") == variant
        assert tc.tool_call_id == sanitize_tool_call_id("call|1")
        empty = a.ToolCall(tool_call_id=tc.tool_call_id)
        getattr(empty, variant).SetInParent()
        if name == "my_mcp":
            assert (tc.mcp_tool_call.args.name, tc.mcp_tool_call.args.tool_name) == (name, name)
        else:
            assert tc == empty


@pytest.mark.parametrize(
    ("raw", "check"),
    [
        ("toolu_01AB-c", lambda s: s == "toolu_01AB-c"),
        (
            "call_1|fc_2",
            lambda s: s.startswith("call_1_fc_2_") and len(s) == len("call_1_fc_2_") + 8,
        ),
        ("", lambda s: s.startswith("call_")),
    ],
)
def test_sanitize_tool_call_id(raw: str, check: Callable[[str], bool]) -> None:
    out = sanitize_tool_call_id(raw)
    assert check(out)
    assert all(c.isalnum() or c in "_-" for c in out)
    assert sanitize_tool_call_id("a|b") != sanitize_tool_call_id("a_b")


def test_the_model_id_stays_in_the_result_and_the_sanitized_one_goes_out() -> None:
    tool, out, _ = start("Delete", {"path": "f"}, call_id="call|7")
    assert esm(out).exec_id == esm(out).delete_args.tool_call_id == sanitize_tool_call_id("call|7")
    done = finished(
        tool.feed(reply(1, delete_result=a.DeleteResult(success=a.DeleteSuccess())), T0)
    )
    assert done.result.tool_call_id == "call|7"
    assert completed(done).tool_call_id == sanitize_tool_call_id("call|7")


# -- illegal calls -------------------------------------------------------------------------------


def test_start_twice_raises() -> None:
    tool, _, _ = start("Read", {"path": "f"})
    with pytest.raises(RuntimeError, match="starts once"):
        tool.start(Ids(), T0)
    assert tool.phase is Phase.RUNNING and tool.exec_ids == {1}
    # Also after an early end.
    tool, started, _ = begin("Read", {})
    assert started.early is not None
    with pytest.raises(RuntimeError):
        tool.start(Ids(), T0)


def test_feed_before_start_raises() -> None:
    tool = machine("Read", {"path": "f"})
    with pytest.raises(RuntimeError, match="before start"):
        tool.feed(reply(1, read_result=a.ReadResult()), T0)
    assert tool.phase is Phase.NEW


def test_complete_locally_after_the_machine_finished_raises() -> None:
    tool, _, _ = start("Delete", {"path": "f"})
    finished(tool.feed(reply(1, delete_result=a.DeleteResult(success=a.DeleteSuccess())), T0))
    with pytest.raises(RuntimeError, match="card is out"):
        tool.complete_locally(_result("Delete", "Error: canceled"), T0)


# -- control messages ----------------------------------------------------------------------------


def test_throw_and_early_stream_close_are_error_results() -> None:
    tool, _, _ = start("Read", {"path": "a"})
    assert tool.feed(heartbeat(1), T0) == Send(())
    assert tool.phase is Phase.RUNNING
    throw = _throw(1, error="No handler found for server message of type read")
    done = finished(tool.feed(throw, T0 + 1))
    assert done.result.is_error
    assert "could not run the Read call: No handler found" in done.result.text
    assert completed(done).read_tool_call.result.error.error_message == done.result.text
    assert tool.phase is Phase.DONE

    tool, _, _ = start("Delete", {"path": "a"})
    done = finished(tool.feed(close(1), T0 + 1))
    assert done.result.is_error and "closed the Delete exec stream before" in done.result.text
    assert completed(done).delete_tool_call.result.WhichOneof("result") == "error"


def test_throw_with_error_code_and_without_error() -> None:
    tool, _, _ = start("LS", {"path": "a"})
    done = finished(tool.feed(_throw(1, error_code="E42"), T0))
    assert done.result.text == "Error: the client could not run the LS call (E42): unknown error"


def test_empty_reply_is_not_a_completion_and_wrong_reply_is_an_error() -> None:
    tool, _, _ = start("Read", {"path": "a"})
    assert "empty" in ignored(tool.feed(reply(1), T0))
    assert tool.phase is Phase.RUNNING and tool.exec_ids == {1}
    done = finished(tool.feed(reply(1, ls_result=a.LsResult()), T0))
    assert done.result.is_error and "unexpected ls_result" in done.result.text


# -- Ignored, one case at a time -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (reply(9, read_result=a.ReadResult()), "exec 9 is not waited on"),
        (reply(1), "empty reply"),
        (_throw(9, error="boom"), "throw for exec 9"),
        (close(9), "stream_close for exec 9"),
        (heartbeat(9), "heartbeat for exec 9"),
        (a.ExecClientControlMessage(), "empty exec control message"),
    ],
)
def test_messages_a_running_call_does_not_take(
    message: a.ExecClientMessage | a.ExecClientControlMessage, why: str
) -> None:
    tool, _, _ = start("Read", {"path": "f"})
    assert why in ignored(tool.feed(message, T0))
    assert tool.phase is Phase.RUNNING and tool.exec_ids == {1}
    # The call goes on as if nothing came.
    ok = a.ReadResult(success=a.ReadSuccess(content="x"))
    assert finished(tool.feed(reply(1, read_result=ok), T0)).result.text == "     1\tx"


@pytest.mark.parametrize(
    "message",
    [
        reply(1, read_result=a.ReadResult(success=a.ReadSuccess(content="x"))),
        heartbeat(1),
        close(1),
        _throw(1, error="late"),
        reply(1),
    ],
)
def test_nothing_is_taken_after_the_end(
    message: a.ExecClientMessage | a.ExecClientControlMessage,
) -> None:
    tool, _, _ = start("Read", {"path": "f"})
    finished(tool.feed(_throw(1, error="boom"), T0))
    assert "already over" in ignored(tool.feed(message, T0))
    assert tool.phase is Phase.DONE


def test_missing_required_arguments_finish_without_any_exec() -> None:
    tool, started, ids = begin("StrReplace", {"path": "a", "old_string": "x"})
    out = decode(started.frames)
    early = started.early
    assert early is not None and early.result.is_error
    assert "new_string" in early.result.text
    assert early.result.text == (
        "Error: the StrReplace call is missing the required string argument(s) new_string. "
        "Call it again with all required arguments."
    )
    # Only tool_call_started goes out: no exec is sent, no edit is attempted.
    assert len(out) == 1 and out[0].interaction_update.HasField("tool_call_started")
    assert tool.exec_ids == set() and tool.phase is Phase.DONE and ids.next == 1
    assert completed(early).edit_tool_call.result.error.error == early.result.text
    # Late messages change nothing.
    assert "over" in ignored(tool.feed(heartbeat(1), T0))
    assert "over" in ignored(tool.feed(reply(1, read_result=a.ReadResult()), T0))
    tool, started, _ = begin("Shell", {})
    assert started.early is not None and "command" in started.early.result.text
    assert len(started.frames) == 1


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        ({"path": "a", "old_string": "", "new_string": "b"}, "old_string must not be empty"),
        ({"path": "a", "old_string": "b", "new_string": "b"}, "identical; nothing would change"),
        ({"path": 3, "old_string": "b"}, "argument(s) path, new_string."),
    ],
)
def test_str_replace_argument_problems(args: dict[str, Any], expect: str) -> None:
    _tool, started, _ = begin("StrReplace", args)
    assert started.early is not None and expect in started.early.result.text


# -- the phase after each event ------------------------------------------------------------------


def test_phases_of_a_str_replace() -> None:
    tool = machine("StrReplace", {"path": "m", "old_string": "a", "new_string": "b"})
    assert tool.phase is Phase.NEW
    tool.start(Ids(), T0)
    assert tool.phase is Phase.RUNNING and tool.exec_ids == {1}
    assert tool.feed(heartbeat(1), T0) == Send(())
    assert tool.phase is Phase.RUNNING
    tool.feed(reply(1, read_result=a.ReadResult(success=a.ReadSuccess(content="a"))), T0)
    assert tool.phase is Phase.WRITING and tool.exec_ids == {2}
    ignored(tool.feed(heartbeat(1), T0))
    assert tool.feed(heartbeat(2), T0) == Send(())
    assert tool.phase is Phase.WRITING
    tool.feed(reply(2, write_result=a.WriteResult(success=a.WriteSuccess())), T0)
    assert tool.phase is Phase.DONE and tool.exec_ids == set()


def test_abort_sends_one_abort_per_waited_exec_then_takes_nothing() -> None:
    tool, _, _ = start("Shell", {"command": "sleep 999"})
    aborts = decode(tool.abort())
    assert [m.exec_server_control_message.abort.id for m in aborts] == [1]
    assert tool.exec_ids == set() and tool.phase is Phase.ABORTED
    assert tool.abort() == ()
    assert "aborted" in ignored(tool.feed(reply(1, shell_result=a.ShellResult()), T0))
    # The loop writes the timeout result; the card comes from complete_locally.
    text = "Error: the client did not answer the Shell call within 600 s; it was aborted."
    tc = completed_card(tool.complete_locally(_result("Shell", text), T0 + 600_000))
    assert tc.shell_tool_call.result.failure.stderr == text
    assert tc.shell_tool_call.args.command == "sleep 999"
    assert tc.completed_at_ms == T0 + 600_000
    assert tool.phase is Phase.DONE


def test_abort_of_a_str_replace_aborts_the_write() -> None:
    tool, _, _ = start("StrReplace", {"path": "m", "old_string": "a", "new_string": "b"})
    tool.feed(reply(1, read_result=a.ReadResult(success=a.ReadSuccess(content="a"))), T0)
    aborts = decode(tool.abort())
    assert [m.exec_server_control_message.abort.id for m in aborts] == [2]
    assert tool.phase is Phase.ABORTED


def test_abort_before_start_and_after_the_end_sends_nothing() -> None:
    tool = machine("Read", {"path": "f"})
    assert tool.abort() == () and tool.phase is Phase.NEW
    tool, _, _ = start("Read", {"path": "f"})
    finished(tool.feed(close(1), T0))
    assert tool.abort() == () and tool.phase is Phase.DONE


# -- complete_locally ----------------------------------------------------------------------------


def test_complete_locally_for_calls_the_loop_answered() -> None:
    tool = machine("Grep", {"pattern": "x"})
    card = tool.complete_locally(_result("Grep", "Error: canceled"), T0)
    tc = completed_card(card)
    assert tc.grep_tool_call.args.pattern == "x"
    assert tc.grep_tool_call.result.error.error == "Error: canceled"
    assert tc.started_at_ms == tc.completed_at_ms == T0
    assert tool.phase is Phase.DONE

    lost = (
        "Error: this Write call was sent to the client, but its answer was lost (the server "
        "restarted or the connection dropped). Its outcome is unknown and it was not run again."
    )
    tc = completed_card(
        machine("Write", {"path": "f", "contents": "x"}).complete_locally(
            _result("Write", lost), T0
        )
    )
    assert tc.edit_tool_call.result.error.path == "f"
    assert tc.edit_tool_call.result.error.model_visible_error == lost
    assert tc.edit_tool_call.args.stream_content == "x"


def test_complete_locally_keeps_the_start_time_and_an_empty_text_gets_a_note() -> None:
    tool, _, _ = start("Delete", {"path": "f"})
    empty = ToolResultMessage(tool_call_id="toolu_1", tool_name="Delete", content=())
    tc = completed_card(tool.complete_locally(empty, T0 + 50))
    assert (tc.started_at_ms, tc.completed_at_ms) == (T0, T0 + 50)
    assert tc.delete_tool_call.result.error.error == "the call was not run"
    # It does not abort: the exec still out can be aborted after.
    assert tool.exec_ids == {1}
    assert [m.exec_server_control_message.abort.id for m in decode(tool.abort())] == [1]


def test_complete_locally_with_unusable_arguments() -> None:
    tool = machine("Read", {"path": ["not", "a", "string"], "offset": "--3"})
    tc = completed_card(tool.complete_locally(_result("Read", "Error: invalid arguments"), T0))
    assert tc.read_tool_call.args.path == "" and not tc.read_tool_call.args.HasField("offset")
    assert tc.read_tool_call.result.error.error_message == "Error: invalid arguments"


# -- robustness ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TOOL_ARGS))
def test_any_reply_kind_gives_a_step_never_an_exception(name: str) -> None:
    for kind in REPLY_KINDS:
        tool, out, _ = start(name, TOOL_ARGS[name])
        exec_id = esm(out).id
        msg = a.ExecClientMessage(id=exec_id)
        getattr(msg, kind).SetInParent()
        step = tool.feed(msg, T0)
        assert isinstance(step, Send | Finished | Ignored)
        if isinstance(step, Finished):
            completed(step)
            assert step.result.tool_call_id == "toolu_1"
            assert tool.phase is Phase.DONE and tool.exec_ids == set()
        else:
            assert tool.phase is not Phase.DONE


@pytest.mark.parametrize("name", sorted(TOOL_ARGS))
def test_a_reply_kind_outside_the_table_is_an_unexpected_reply(name: str) -> None:
    cls: type[ToolMachine] = NATIVE_MACHINES.get(name, McpMachine)
    taken = cls.HANDLERS[Phase.RUNNING]
    for kind in REPLY_KINDS:
        if kind in taken:
            continue
        tool, out, _ = start(name, TOOL_ARGS[name])
        msg = a.ExecClientMessage(id=esm(out).id)
        getattr(msg, kind).SetInParent()
        done = finished(tool.feed(msg, T0))
        assert done.result.text == (
            f"Error: the client answered the {name} call with an unexpected {kind} reply."
        )


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["--3", "²", " 7 ", "true", "False", "-0"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_KEYS = st.sampled_from(
    [
        "command", "working_directory", "block_until_ms", "shell_id", "path", "offset",
        "limit", "contents",
        "old_string", "new_string", "replace_all", "pattern", "glob", "output_mode",
        "case_insensitive", "glob_pattern", "target_directory", "q",
    ]
)  # fmt: skip


@given(
    name=st.sampled_from(sorted(TOOL_ARGS)),
    args=st.dictionaries(_KEYS, _JSON, max_size=6),
    kinds=st.lists(
        st.sampled_from([*REPLY_KINDS, "stream_close", "throw", "heartbeat"]), max_size=4
    ),
)
def test_any_arguments_and_replies_never_raise(
    name: str, args: dict[str, Any], kinds: list[str]
) -> None:
    tool, started, _ = begin(name, args)
    assert (started.early is None) == (tool.phase is Phase.RUNNING)
    for kind in kinds:
        waited = sorted(tool.exec_ids) or [1]
        if kind in ("stream_close", "throw", "heartbeat"):
            control = a.ExecClientControlMessage()
            getattr(control, kind).id = waited[0]
            step = tool.feed(control, T0)
        else:
            msg = a.ExecClientMessage(id=waited[0])
            getattr(msg, kind).SetInParent()
            step = tool.feed(msg, T0)
        assert isinstance(step, Send | Finished | Ignored)
        waiting = tool.phase in (Phase.RUNNING, Phase.WRITING, Phase.RETRYING)
        assert bool(tool.exec_ids) == waiting, (tool, step)
    if tool.phase is not Phase.DONE:
        tool.abort()
        completed_card(tool.complete_locally(_result(name, "Error: canceled"), T0))
