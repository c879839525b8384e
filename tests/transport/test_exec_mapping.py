"""Tool execution on the client: exec requests per tool and realistic client replies (the
shapes oh-my-pi's Cursor provider sends: shell_stream start/stdout/stderr/exit, then
shell_result, then stream_close), for success and for every error variant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from cursor_byok.llm.types import ImageContent, TextContent, ToolCall, ToolResultMessage
from cursor_byok.transport.context import McpIndex
from cursor_byok.transport.exec_mapping import (
    DEFAULT_SHELL_TIMEOUT_MS,
    MAX_RESULT_CHARS,
    Finished,
    Send,
    ToolExecution,
    format_read,
    sanitize_tool_call_id,
)
from cursor_byok.transport.cursor.proto import agent_pb2 as a

T0 = 1_700_000_000_000


class Ids:
    def __init__(self, start: int = 1) -> None:
        self.next = start

    def __call__(self) -> int:
        n = self.next
        self.next += 1
        return n


def _wire(msg: a.AgentServerMessage) -> a.AgentServerMessage:
    return a.AgentServerMessage.FromString(msg.SerializeToString())


def _start(
    name: str, args: dict[str, Any], mcp: McpIndex | None = None, call_id: str = "toolu_1"
) -> tuple[ToolExecution, list[a.AgentServerMessage], Ids]:
    ids = Ids()
    tool = ToolExecution(
        ToolCall(id=call_id, name=name, arguments=args),
        call_id="llm1-0",
        model_call_id="conv:1:llm1",
        mcp=mcp or McpIndex.empty(),
        conversation_id="conv",
    )
    out = [_wire(m) for m in tool.start(ids, T0)]
    return tool, out, ids


def _exec_reply(exec_id: int, **oneof: Any) -> a.ExecClientMessage:
    return a.ExecClientMessage(id=exec_id, **oneof)


def _close(exec_id: int) -> a.ExecClientControlMessage:
    return a.ExecClientControlMessage(stream_close=a.ExecClientStreamClose(id=exec_id))


def _finished(step: Send | Finished) -> Finished:
    assert isinstance(step, Finished), step
    return step


def _completed(done: Finished) -> a.ToolCall:
    assert done.completed is not None
    update = _wire(done.completed).interaction_update
    assert update.WhichOneof("message") == "tool_call_completed"
    c = update.tool_call_completed
    assert c.call_id == "llm1-0" and c.model_call_id == "conv:1:llm1"
    assert c.tool_call.started_at_ms == T0
    assert c.tool_call.completed_at_ms >= T0
    return c.tool_call


def _started(out: list[a.AgentServerMessage]) -> a.ToolCall:
    update = out[0].interaction_update
    assert update.WhichOneof("message") == "tool_call_started"
    s = update.tool_call_started
    assert s.call_id == "llm1-0" and s.model_call_id == "conv:1:llm1"
    assert s.tool_call.tool_call_id == "toolu_1"
    return s.tool_call


def _esm(out: list[a.AgentServerMessage], i: int = 1) -> a.ExecServerMessage:
    assert out[i].WhichOneof("message") == "exec_server_message"
    return out[i].exec_server_message


# -- Shell ---------------------------------------------------------------------------------------


def _stream(exec_id: int, **event: Any) -> a.ExecClientMessage:
    return _exec_reply(exec_id, shell_stream=a.ShellStream(**event))


def test_shell_streamed_then_result_then_close() -> None:
    tool, out, _ = _start("Shell", {"command": "make test", "working_directory": "/w"})
    started = _started(out)
    assert started.shell_tool_call.args.command == "make test"
    esm = _esm(out)
    assert esm.id == 1 and esm.WhichOneof("message") == "shell_stream_args"
    args = esm.shell_stream_args
    assert (args.command, args.working_directory, args.tool_call_id) == (
        "make test",
        "/w",
        "toolu_1",
    )
    assert args.timeout == DEFAULT_SHELL_TIMEOUT_MS and args.conversation_id == "conv"
    assert args.close_stdin and args.timeout_behavior == a.TIMEOUT_BEHAVIOR_CANCEL
    assert tool.exec_ids == {1}

    assert tool.feed(_stream(1, start=a.ShellStreamStart()), T0 + 1) == Send()
    step = tool.feed(_stream(1, stdout=a.ShellStreamStdout(data="ok 1\n")), T0 + 2)
    assert isinstance(step, Send) and len(step.messages) == 1
    delta = _wire(step.messages[0]).interaction_update.tool_call_delta
    assert delta.call_id == "llm1-0" and delta.model_call_id == "conv:1:llm1"
    assert delta.tool_call_delta.shell_tool_call_delta.stdout.content == "ok 1\n"
    step = tool.feed(_stream(1, stderr=a.ShellStreamStderr(data="warn\n")), T0 + 3)
    assert isinstance(step, Send)
    assert (
        _wire(
            step.messages[0]
        ).interaction_update.tool_call_delta.tool_call_delta.shell_tool_call_delta.stderr.content
        == "warn\n"
    )
    assert tool.feed(_stream(1, exit=a.ShellStreamExit(code=0, cwd="/w")), T0 + 4) == Send()
    result = a.ShellResult(
        success=a.ShellSuccess(
            command="make test",
            working_directory="/w",
            exit_code=0,
            stdout="ok 1\n",
            stderr="warn\n",
        )
    )
    done = _finished(tool.feed(_exec_reply(1, shell_result=result), T0 + 5))
    assert done.result == ToolResultMessage(
        tool_call_id="toolu_1",
        tool_name="Shell",
        content=(TextContent(text="Exit code: 0\nstdout:\nok 1\n\nstderr:\nwarn\n"),),
    )
    tc = _completed(done)
    assert tc.shell_tool_call.args.command == "make test"
    assert tc.shell_tool_call.result.success.stdout == "ok 1\n"
    assert tc.completed_at_ms == T0 + 5
    assert tool.exec_ids == set()
    assert tool.feed(_close(1), T0 + 6) == Send()  # the stream_close after the result


def test_shell_nonzero_exit_from_failure_result_uses_streamed_output() -> None:
    tool, _, _ = _start("Shell", {"command": "false", "timeout_ms": 5000})
    tool.feed(_stream(1, stdout=a.ShellStreamStdout(data="partial")), T0)
    failure = a.ShellResult(failure=a.ShellFailure(command="false", exit_code=2))
    done = _finished(tool.feed(_exec_reply(1, shell_result=failure), T0 + 1))
    assert done.result.is_error
    assert done.result.text == "Exit code: 2\nstdout:\npartial"
    assert _completed(done).shell_tool_call.result.failure.exit_code == 2


def test_shell_timeout_argument_is_milliseconds() -> None:
    _, out, _ = _start("Shell", {"command": "sleep 1", "timeout_ms": 5000})
    assert _esm(out).shell_stream_args.timeout == 5000
    assert _esm(out).shell_stream_args.hard_timeout == 5000


def test_shell_stream_exit_then_close_without_result() -> None:
    tool, _, _ = _start("Shell", {"command": "ls"})
    tool.feed(_stream(1, stdout=a.ShellStreamStdout(data="a\n")), T0)
    tool.feed(_stream(1, exit=a.ShellStreamExit(code=1)), T0)
    done = _finished(tool.feed(_close(1), T0 + 9))
    assert done.result.is_error and done.result.text == "Exit code: 1\nstdout:\na\n"
    assert _completed(done).shell_tool_call.result.failure.exit_code == 1


@pytest.mark.parametrize(
    ("result", "expect"),
    [
        (
            a.ShellResult(timeout=a.ShellTimeout(command="x", timeout_ms=3000)),
            "The command timed out after 3000 ms",
        ),
        (
            a.ShellResult(rejected=a.ShellRejected(command="x", reason="not allowed")),
            "The user rejected this command: not allowed",
        ),
        (
            a.ShellResult(spawn_error=a.ShellSpawnError(command="x", error="ENOENT bash")),
            "could not be started: ENOENT bash",
        ),
        (
            a.ShellResult(permission_denied=a.ShellPermissionDenied(error="sandbox")),
            "permission denied: sandbox",
        ),
        (
            a.ShellResult(
                failure=a.ShellFailure(
                    exit_code=130, aborted=True, abort_reason=a.SHELL_ABORT_REASON_USER_ABORT
                )
            ),
            "The command was aborted (user_abort).",
        ),
    ],
)
def test_shell_error_results(result: a.ShellResult, expect: str) -> None:
    tool, _, _ = _start("Shell", {"command": "x"})
    done = _finished(tool.feed(_exec_reply(1, shell_result=result), T0 + 1))
    assert done.result.is_error
    assert expect in done.result.text
    assert _completed(done).shell_tool_call.result == result


@pytest.mark.parametrize(
    ("event", "expect"),
    [
        ({"rejected": a.ShellRejected(reason="denied by user")}, "rejected this command"),
        ({"permission_denied": a.ShellPermissionDenied(error="no")}, "permission denied"),
    ],
)
def test_shell_stream_rejections(event: dict[str, Any], expect: str) -> None:
    tool, _, _ = _start("Shell", {"command": "rm -rf /"})
    done = _finished(tool.feed(_stream(1, **event), T0 + 1))
    assert done.result.is_error and expect in done.result.text
    assert _completed(done).shell_tool_call.result.WhichOneof("result") == "failure"


def test_shell_long_output_is_cut_with_a_note() -> None:
    tool, _, _ = _start("Shell", {"command": "yes"})
    big = "y\n" * 40_000
    result = a.ShellResult(success=a.ShellSuccess(exit_code=0, stdout=big))
    done = _finished(tool.feed(_exec_reply(1, shell_result=result), T0))
    assert len(done.result.text) < MAX_RESULT_CHARS + 200
    assert "characters omitted" in done.result.text


# -- control messages ----------------------------------------------------------------------------


def test_throw_and_early_stream_close_are_error_results() -> None:
    tool, _, _ = _start("Read", {"path": "a"})
    assert tool.feed(a.ExecClientControlMessage(heartbeat=a.ExecClientHeartbeat(id=1)), T0) == (
        Send()
    )
    throw = a.ExecClientThrow(id=1, error="No handler found for server message of type read")
    done = _finished(tool.feed(a.ExecClientControlMessage(throw=throw), T0 + 1))
    assert done.result.is_error
    assert "could not run the Read call: No handler found" in done.result.text
    assert _completed(done).read_tool_call.result.error.error_message == done.result.text

    tool, _, _ = _start("Delete", {"path": "a"})
    done = _finished(tool.feed(_close(1), T0 + 1))
    assert done.result.is_error and "closed the Delete exec stream before" in done.result.text
    assert _completed(done).delete_tool_call.result.WhichOneof("result") == "error"


def test_empty_reply_is_not_a_completion_and_wrong_reply_is_an_error() -> None:
    tool, _, _ = _start("Read", {"path": "a"})
    assert tool.feed(_exec_reply(1), T0) == Send()
    done = _finished(tool.feed(_exec_reply(1, ls_result=a.LsResult()), T0))
    assert done.result.is_error and "unexpected ls_result" in done.result.text


def test_timeout_unknown_outcome_abort_and_local_completion() -> None:
    tool, _, _ = _start("Shell", {"command": "sleep 999"})
    aborts = [_wire(m) for m in tool.abort_messages()]
    assert [m.exec_server_control_message.abort.id for m in aborts] == [1]
    done = tool.timeout_result(T0 + 600_000)
    assert done.result.is_error and "did not answer the Shell call within 600 s" in done.result.text
    assert _completed(done).shell_tool_call.result.failure.stderr == done.result.text

    tool2 = ToolExecution(
        ToolCall(id="toolu_1", name="Write", arguments={"path": "f", "contents": "x"}),
        call_id="llm1-0",
        model_call_id="conv:1:llm1",
        mcp=McpIndex.empty(),
        conversation_id="conv",
    )
    done = tool2.unknown_outcome_result(T0)
    assert done.result.is_error
    assert "outcome is unknown and it was not run again" in done.result.text
    assert _completed(done).edit_tool_call.result.error.path == "f"

    tool3 = ToolExecution(
        ToolCall(id="toolu_1", name="Grep", arguments={"pattern": "x"}),
        call_id="llm1-0",
        model_call_id="conv:1:llm1",
        mcp=McpIndex.empty(),
        conversation_id="conv",
    )
    result = ToolResultMessage(
        tool_call_id="toolu_1",
        tool_name="Grep",
        content=(TextContent(text="Error: canceled"),),
        is_error=True,
    )
    msg = _wire(tool3.local_completion(result, T0))
    tc = msg.interaction_update.tool_call_completed.tool_call
    assert tc.grep_tool_call.args.pattern == "x"
    assert tc.grep_tool_call.result.error.error == "Error: canceled"
    assert tc.started_at_ms == tc.completed_at_ms == T0


def test_missing_required_arguments_finish_without_any_exec() -> None:
    tool, out, _ = _start("StrReplace", {"path": "a", "old_string": "x"})
    assert tool.finished_early is not None and tool.finished_early.result.is_error
    assert "new_string" in tool.finished_early.result.text
    # Only tool_call_started goes out: no exec is sent, no edit is attempted.
    assert len(out) == 1 and out[0].interaction_update.HasField("tool_call_started")
    assert tool.exec_ids == set() and tool.finished
    done = tool.finished_early
    assert _completed(done).edit_tool_call.result.error.error == done.result.text
    # Late messages change nothing.
    assert tool.feed(a.ExecClientControlMessage(heartbeat=a.ExecClientHeartbeat(id=1)), T0) == (
        Send()
    )
    tool, out, _ = _start("Shell", {})
    assert tool.finished_early is not None and "command" in tool.finished_early.result.text
    assert len(out) == 1


# -- Read ----------------------------------------------------------------------------------------


def test_read_success_with_line_numbers() -> None:
    tool, out, _ = _start("Read", {"path": "src/a.py"})
    assert _started(out).read_tool_call.args.path == "src/a.py"
    ra = _esm(out).read_args
    assert (ra.path, ra.tool_call_id, ra.HasField("offset")) == ("src/a.py", "toolu_1", False)
    ok = a.ReadResult(success=a.ReadSuccess(path="/w/src/a.py", content="a\nb\n", total_lines=2))
    done = _finished(tool.feed(_exec_reply(1, read_result=ok), T0 + 1))
    assert done.result.text == "     1\ta\n     2\tb"
    tc = _completed(done)
    assert tc.read_tool_call.result.success.content == "a\nb\n"
    assert tc.read_tool_call.result.success.total_lines == 2


def test_read_range_applied_here_when_client_ignores_it() -> None:
    tool, out, _ = _start("Read", {"path": "f", "offset": 3, "limit": 2})
    assert (_esm(out).read_args.offset, _esm(out).read_args.limit) == (3, 2)
    content = "\n".join(f"l{i}" for i in range(1, 11))
    ok = a.ReadResult(success=a.ReadSuccess(content=content, total_lines=10))
    done = _finished(tool.feed(_exec_reply(1, read_result=ok), T0))
    assert done.result.text.startswith("     3\tl3\n     4\tl4\n")
    assert "of 10" in done.result.text and "offset=5" in done.result.text


def test_read_range_applied_by_client() -> None:
    tool, _, _ = _start("Read", {"path": "f", "offset": 3, "limit": 2})
    ok = a.ReadResult(success=a.ReadSuccess(content="l3\nl4", total_lines=10, range_applied=True))
    done = _finished(tool.feed(_exec_reply(1, read_result=ok), T0))
    assert done.result.text.startswith("     3\tl3\n     4\tl4")


@pytest.mark.parametrize(
    ("result", "expect"),
    [
        (a.ReadResult(file_not_found=a.ReadFileNotFound(path="f")), "file not found: f"),
        (a.ReadResult(permission_denied=a.ReadPermissionDenied(path="f")), "permission denied"),
        (a.ReadResult(rejected=a.ReadRejected(path="f", reason="private")), "rejected reading"),
        (a.ReadResult(error=a.ReadError(path="f", error="EISDIR")), "EISDIR"),
        (a.ReadResult(invalid_file=a.ReadInvalidFile(path="f", reason="binary")), "binary"),
        (a.ReadResult(), "empty read result"),
    ],
)
def test_read_errors(result: a.ReadResult, expect: str) -> None:
    tool, _, _ = _start("Read", {"path": "f"})
    done = _finished(tool.feed(_exec_reply(1, read_result=result), T0))
    assert done.result.is_error and expect in done.result.text
    assert _completed(done).read_tool_call.result.error.error_message == done.result.text


def test_format_read_cuts_at_line_boundary() -> None:
    text = format_read("x" * 100 + "\n" + ("y" * 1000 + "\n") * 100)
    assert len(text) < MAX_RESULT_CHARS + 300
    assert "Read on with offset=" in text
    assert format_read("") == "(the file is empty)"


# -- Write / StrReplace --------------------------------------------------------------------------


def test_write_success_and_failures() -> None:
    tool, out, _ = _start("Write", {"path": "n.txt", "contents": "a\nb\n"})
    assert _started(out).edit_tool_call.args.stream_content == "a\nb\n"
    wa = _esm(out).write_args
    assert (wa.path, wa.file_text, wa.tool_call_id) == ("n.txt", "a\nb\n", "toolu_1")
    ok = a.WriteResult(success=a.WriteSuccess(path="/w/n.txt", lines_created=2))
    done = _finished(tool.feed(_exec_reply(1, write_result=ok), T0))
    assert done.result.text == "Wrote n.txt (2 lines)." and not done.result.is_error
    assert _completed(done).edit_tool_call.result.success.after_full_file_content == "a\nb\n"

    for result, expect, variant in [
        (a.WriteResult(rejected=a.WriteRejected(reason="no")), "rejected writing", "rejected"),
        (a.WriteResult(no_space=a.WriteNoSpace()), "no space", "error"),
        (
            a.WriteResult(permission_denied=a.WritePermissionDenied(error="ro")),
            "ro",
            "write_permission_denied",
        ),
        (a.WriteResult(error=a.WriteError(error="EIO")), "EIO", "error"),
    ]:
        tool, _, _ = _start("Write", {"path": "n.txt", "contents": "x"})
        done = _finished(tool.feed(_exec_reply(1, write_result=result), T0))
        assert done.result.is_error and expect in done.result.text
        assert _completed(done).edit_tool_call.result.WhichOneof("result") == variant


def _str_replace(args: dict[str, Any], content: str) -> tuple[ToolExecution, Send | Finished, Ids]:
    tool, out, ids = _start("StrReplace", args)
    ra = _esm(out).read_args
    assert (ra.path, ra.tool_call_id) == (args["path"], "toolu_1")
    assert not ra.HasField("offset") and not ra.HasField("limit")
    ok = a.ReadResult(success=a.ReadSuccess(content=content))
    return tool, tool.feed(_exec_reply(1, read_result=ok), T0 + 1), ids


def test_str_replace_reads_then_writes_edited_text() -> None:
    args = {"path": "m.py", "old_string": "x = 1", "new_string": "x = 2"}
    tool, step, _ = _str_replace(args, "a\nx = 1\nb\n")
    assert isinstance(step, Send) and len(step.messages) == 1
    esm = _wire(step.messages[0]).exec_server_message
    assert esm.id == 2 and esm.write_args.file_text == "a\nx = 2\nb\n"
    assert esm.write_args.tool_call_id == "toolu_1"
    assert tool.exec_ids == {2}
    assert tool.feed(_close(1), T0 + 2) == Send()  # the read's stream_close
    ok = a.WriteResult(success=a.WriteSuccess(path="m.py"))
    done = _finished(tool.feed(_exec_reply(2, write_result=ok), T0 + 3))
    assert done.result.text == "Edited m.py: replaced 1 occurrence."
    success = _completed(done).edit_tool_call.result.success
    assert success.before_full_file_content == "a\nx = 1\nb\n"
    assert success.after_full_file_content == "a\nx = 2\nb\n"


def test_str_replace_missing_and_ambiguous_send_no_write() -> None:
    args = {"path": "m.py", "old_string": "zzz", "new_string": "y"}
    _tool, step, ids = _str_replace(args, "abc")
    done = _finished(step)
    assert done.result.is_error and "old_string was not found in m.py" in done.result.text
    assert ids.next == 2  # no write exec allocated
    assert _completed(done).edit_tool_call.result.error.model_visible_error == done.result.text

    args = {"path": "m.py", "old_string": "a", "new_string": "b"}
    _tool, step, ids = _str_replace(args, "a a a")
    done = _finished(step)
    assert done.result.is_error and "occurs 3 times" in done.result.text and ids.next == 2


def test_str_replace_all() -> None:
    args = {"path": "m.py", "old_string": "a", "new_string": "b", "replace_all": True}
    tool, step, _ = _str_replace(args, "a a a")
    assert isinstance(step, Send)
    assert _wire(step.messages[0]).exec_server_message.write_args.file_text == "b b b"
    done = _finished(
        tool.feed(_exec_reply(2, write_result=a.WriteResult(success=a.WriteSuccess())), T0)
    )
    assert done.result.text == "Edited m.py: replaced 3 occurrences."


def test_str_replace_file_not_found_and_failed_write() -> None:
    tool, _out, _ = _start("StrReplace", {"path": "q", "old_string": "a", "new_string": "b"})
    nf = a.ReadResult(file_not_found=a.ReadFileNotFound(path="q"))
    done = _finished(tool.feed(_exec_reply(1, read_result=nf), T0))
    assert done.result.is_error and "file not found" in done.result.text
    assert _completed(done).edit_tool_call.result.file_not_found.path == "q"

    tool, _step, _ = _str_replace({"path": "q", "old_string": "a", "new_string": "b"}, "a")
    rej = a.WriteResult(rejected=a.WriteRejected(path="q", reason="user said no"))
    done = _finished(tool.feed(_exec_reply(2, write_result=rej), T0))
    assert done.result.is_error and "The edit was not applied." in done.result.text


# -- Delete / LS / Grep / Glob -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "expect", "error"),
    [
        (a.DeleteResult(success=a.DeleteSuccess(path="f")), "Deleted f.", False),
        (a.DeleteResult(file_not_found=a.DeleteFileNotFound(path="f")), "file not found", True),
        (a.DeleteResult(not_file=a.DeleteNotFile(actual_type="directory")), "directory", True),
        (a.DeleteResult(permission_denied=a.DeletePermissionDenied()), "permission denied", True),
        (a.DeleteResult(file_busy=a.DeleteFileBusy()), "busy", True),
        (
            a.DeleteResult(rejected=a.DeleteRejected(reason="keep")),
            "rejected deleting f: keep",
            True,
        ),
        (a.DeleteResult(error=a.DeleteError(error="EIO")), "EIO", True),
    ],
)
def test_delete(result: a.DeleteResult, expect: str, error: bool) -> None:
    tool, out, _ = _start("Delete", {"path": "f"})
    assert _esm(out).delete_args == a.DeleteArgs(path="f", tool_call_id="toolu_1")
    done = _finished(tool.feed(_exec_reply(1, delete_result=result), T0))
    assert done.result.is_error is error and expect in done.result.text
    assert _completed(done).delete_tool_call.result == result


def test_ls_tree() -> None:
    tool, out, _ = _start("LS", {"path": "/w"})
    assert _esm(out).ls_args.path == "/w"
    root = a.LsDirectoryTreeNode(abs_path="/w", children_were_processed=True)
    sub = root.children_dirs.add(abs_path="/w/src", children_were_processed=True)
    sub.children_files.add(name="main.py")
    root.children_dirs.add(abs_path="/w/node_modules", num_files=900)
    root.children_files.add(name="README.md")
    done = _finished(
        tool.feed(
            _exec_reply(1, ls_result=a.LsResult(success=a.LsSuccess(directory_tree_root=root))), T0
        )
    )
    assert done.result.text == (
        "/w/\n  node_modules/\n    [900 files, not listed]\n  src/\n    main.py\n  README.md"
    )
    assert _completed(done).ls_tool_call.result.success.directory_tree_root == root
    tool, _, _ = _start("LS", {"path": "/nope"})
    done = _finished(
        tool.feed(_exec_reply(1, ls_result=a.LsResult(error=a.LsError(error="ENOENT"))), T0)
    )
    assert done.result.is_error and "ENOENT" in done.result.text


def test_grep_modes() -> None:
    tool, out, _ = _start(
        "Grep",
        {
            "pattern": "TODO",
            "path": "src",
            "glob": "*.py",
            "output_mode": "content",
            "case_insensitive": True,
        },
    )
    ga = _esm(out).grep_args
    assert (ga.pattern, ga.path, ga.glob, ga.output_mode, ga.case_insensitive) == (
        "TODO",
        "src",
        "*.py",
        "content",
        True,
    )
    assert ga.tool_call_id == "toolu_1"
    success = a.GrepSuccess(pattern="TODO", output_mode="content")
    fm = success.workspace_results["/w"].content.matches.add(file="src/a.py")
    fm.matches.add(line_number=3, content="# TODO fix")
    fm.matches.add(line_number=4, content="x = 1", is_context_line=True)
    done = _finished(tool.feed(_exec_reply(1, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text == "src/a.py:\n  3: # TODO fix\n  4- x = 1"
    assert _completed(done).grep_tool_call.result.success == success

    tool, _, _ = _start("Grep", {"pattern": "x", "output_mode": "count"})
    success = a.GrepSuccess()
    success.workspace_results["/w"].count.counts.add(file="a.py", count=7)
    success.workspace_results["/w"].count.client_truncated = True
    done = _finished(tool.feed(_exec_reply(1, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text.startswith("a.py: 7\n[Results were truncated")

    tool, _, _ = _start("Grep", {"pattern": "x"})
    done = _finished(
        tool.feed(_exec_reply(1, grep_result=a.GrepResult(success=a.GrepSuccess())), T0)
    )
    assert done.result.text == "No matches."
    tool, _, _ = _start("Grep", {"pattern": "("})
    bad = a.GrepResult(error=a.GrepError(error="regex parse error"))
    done = _finished(tool.feed(_exec_reply(1, grep_result=bad), T0))
    assert done.result.is_error and "regex parse error" in done.result.text


def test_glob_is_grep_in_files_mode() -> None:
    tool, out, _ = _start("Glob", {"glob_pattern": "**/*.ts", "target_directory": "web"})
    started = _started(out).glob_tool_call.args
    assert (started.glob_pattern, started.target_directory) == ("**/*.ts", "web")
    ga = _esm(out).grep_args
    assert (ga.pattern, ga.glob, ga.path, ga.output_mode) == (
        "",
        "**/*.ts",
        "web",
        "files_with_matches",
    )
    success = a.GrepSuccess(output_mode="files_with_matches")
    success.workspace_results["/w"].files.files.extend(["web/a.ts", "web/b.ts"])
    done = _finished(tool.feed(_exec_reply(1, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text == "web/a.ts\nweb/b.ts"
    ok = _completed(done).glob_tool_call.result.success
    assert list(ok.files) == ["web/a.ts", "web/b.ts"] and ok.total_files == 2
    tool, _, _ = _start("Glob", {"glob_pattern": "*.none"})
    done = _finished(
        tool.feed(_exec_reply(1, grep_result=a.GrepResult(success=a.GrepSuccess())), T0)
    )
    assert done.result.text == "No files matched."


# -- MCP -----------------------------------------------------------------------------------------


def _mcp_index() -> McpIndex:
    schema = struct_pb2.Value()
    json_format.ParseDict({"type": "object", "properties": {"city": {"type": "string"}}}, schema)
    d = a.McpToolDefinition(
        name="get_weather",
        tool_name="get_weather",
        provider_identifier="pi-agent",
        input_schema=schema,
    )
    return McpIndex.build([d])


def _mcp(args: dict[str, Any]) -> tuple[ToolExecution, a.McpArgs]:
    tool, out, _ = _start("get_weather", args, mcp=_mcp_index())
    assert _started(out).mcp_tool_call.args.name == "get_weather"
    return tool, _esm(out).mcp_args


def test_mcp_args_and_success() -> None:
    tool, ma = _mcp({"city": "Paris", "days": 2, "opts": {"metric": True}})
    assert (ma.name, ma.tool_name, ma.provider_identifier, ma.tool_call_id) == (
        "get_weather",
        "get_weather",
        "pi-agent",
        "toolu_1",
    )
    assert ma.args["city"].string_value == "Paris"
    assert ma.args["days"].number_value == 2
    assert ma.args["opts"].struct_value.fields["metric"].bool_value is True
    success = a.McpSuccess()
    success.content.add().text.text = "Sunny, 21C in Paris"
    success.content.add().image.CopyFrom(a.McpImageContent(data=b"\x89PNG", mime_type="image/png"))
    done = _finished(tool.feed(_exec_reply(1, mcp_result=a.McpResult(success=success)), T0))
    assert done.result.content == (
        TextContent(text="Sunny, 21C in Paris"),
        ImageContent(data="iVBORw==", mime_type="image/png"),
    )
    assert not done.result.is_error
    assert _completed(done).mcp_tool_call.result.success == success


@pytest.mark.parametrize(
    ("result", "expect", "variant"),
    [
        (a.McpResult(success=a.McpSuccess(is_error=True)), "(no text content)", "success"),
        (a.McpResult(error=a.McpError(error="upstream 500")), "upstream 500", "error"),
        (a.McpResult(rejected=a.McpRejected(reason="nope")), "rejected this call", "rejected"),
        (
            a.McpResult(permission_denied=a.McpPermissionDenied(error="blocked")),
            "blocked",
            "permission_denied",
        ),
        (
            a.McpResult(
                tool_not_found=a.McpToolNotFound(name="get_weather", available_tools=["a"])
            ),
            "has no MCP tool 'get_weather' (available: a)",
            "error",
        ),
        (
            a.McpResult(server_not_found=a.McpServerNotFound(name="pi-agent")),
            "is not available",
            "error",
        ),
    ],
)
def test_mcp_errors(result: a.McpResult, expect: str, variant: str) -> None:
    tool, _ = _mcp({"city": "x"})
    done = _finished(tool.feed(_exec_reply(1, mcp_result=result), T0))
    assert done.result.is_error and expect in done.result.text
    assert _completed(done).mcp_tool_call.result.WhichOneof("result") == variant


def test_mcp_approved_is_not_terminal_and_unknown_tool_still_goes_out() -> None:
    tool, _ = _mcp({"city": "x"})
    assert tool.feed(_exec_reply(1, mcp_result=a.McpResult(approved=a.McpApproved())), T0) == Send()
    tool, out, _ = _start("not_offered", {"q": 1})
    ma = _esm(out).mcp_args
    assert (ma.name, ma.tool_name, ma.provider_identifier) == ("not_offered", "not_offered", "")


# -- ids -----------------------------------------------------------------------------------------


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


def test_glob_retries_once_with_dot_when_the_client_refuses_an_empty_pattern() -> None:
    tool, _out, _ = _start("Glob", {"glob_pattern": "*.txt"})
    refusal = a.GrepResult(
        error=a.GrepError(error="grep pattern is required (received an empty pattern).")
    )
    step = tool.feed(_exec_reply(1, grep_result=refusal), T0)
    assert isinstance(step, Send) and len(step.messages) == 1
    retry = _wire(step.messages[0]).exec_server_message
    assert retry.id == 2 and tool.exec_ids == {2}
    assert (retry.grep_args.pattern, retry.grep_args.glob) == (".", "*.txt")
    assert retry.grep_args.output_mode == "files_with_matches"
    success = a.GrepSuccess()
    success.workspace_results["."].files.files.append("hello.txt")
    done = _finished(tool.feed(_exec_reply(2, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text == "hello.txt"
    # A second refusal is final.
    tool, _, _ = _start("Glob", {"glob_pattern": "*.txt"})
    tool.feed(_exec_reply(1, grep_result=refusal), T0)
    done = _finished(tool.feed(_exec_reply(2, grep_result=refusal), T0))
    assert done.result.is_error and "pattern is required" in done.result.text


def test_whole_file_read_has_no_line_count_note() -> None:
    tool, _, _ = _start("Read", {"path": "hello.txt"})
    ok = a.ReadResult(success=a.ReadSuccess(content="hello world\n", total_lines=2))
    done = _finished(tool.feed(_exec_reply(1, read_result=ok), T0))
    assert done.result.text == "     1\thello world"


def test_shell_output_is_not_doubled_when_the_result_repeats_the_stream() -> None:
    tool, _, _ = _start("Shell", {"command": "exit 3"})
    tool.feed(_stream(1, stdout=a.ShellStreamStdout(data="boom\n")), T0)
    tool.feed(_stream(1, exit=a.ShellStreamExit(code=1)), T0)
    failure = a.ShellResult(failure=a.ShellFailure(exit_code=1, stderr="boom\n"))
    done = _finished(tool.feed(_exec_reply(1, shell_result=failure), T0))
    assert done.result.text == "Exit code: 1\nstderr:\nboom\n"


def test_huge_numbers_are_clamped_not_crashing() -> None:
    _, out, _ = _start("Read", {"path": "f", "offset": 10**12, "limit": 10**12})
    ra = _esm(out).read_args
    assert ra.offset == ra.limit == 2**31 - 1
    assert _started(out).read_tool_call.args.limit == 2**31 - 1
    _, out, _ = _start("Shell", {"command": "x", "timeout_ms": 10**15})
    assert _esm(out).shell_stream_args.timeout == 2**31 - 1


TOOL_ARGS: dict[str, dict[str, Any]] = {
    "Shell": {"command": "x"},
    "Read": {"path": "f", "offset": 2, "limit": 1},
    "Write": {"path": "f", "contents": "c"},
    "StrReplace": {"path": "f", "old_string": "a", "new_string": "b"},
    "Delete": {"path": "f"},
    "LS": {"path": "."},
    "Grep": {"pattern": "p"},
    "Glob": {"glob_pattern": "*"},
    "some_mcp": {"k": [1, {"v": None}]},
}


@pytest.mark.parametrize("name", sorted(TOOL_ARGS))
def test_any_reply_kind_gives_a_step_never_an_exception(name: str) -> None:
    replies = [f.name for f in a.ExecClientMessage.DESCRIPTOR.oneofs_by_name["message"].fields]
    for reply in replies:
        tool, out, _ = _start(name, TOOL_ARGS[name])
        exec_id = _esm(out).id
        msg = a.ExecClientMessage(id=exec_id)
        getattr(msg, reply).SetInParent()
        step = tool.feed(msg, T0)
        assert isinstance(step, Send | Finished)
        if isinstance(step, Finished):
            _completed(step)
            assert step.result.tool_call_id == "toolu_1"
