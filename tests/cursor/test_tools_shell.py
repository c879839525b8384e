"""Shell on the client: shell_stream_args, the realistic reply shapes (oh-my-pi's Cursor
provider sends shell_stream start/stdout/stderr/exit, then shell_result, then stream_close)
and every error variant."""

from __future__ import annotations

from typing import Any

import pytest

from cursor_byok.llm.types import TextContent, ToolResultMessage
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import (
    DEFAULT_BLOCK_UNTIL_MS,
    MAX_RESULT_CHARS,
    Phase,
    Send,
)
from tests.cursor.tool_support import (
    T0,
    close,
    completed,
    esm,
    finished,
    ignored,
    reply,
    sent,
    start,
    started_card,
    stream,
)


def test_shell_streamed_then_result_then_close() -> None:
    tool, out, _ = start("Shell", {"command": "make test", "working_directory": "/w"})
    assert tool.phase is Phase.RUNNING
    started = started_card(out)
    assert started.shell_tool_call.args.command == "make test"
    request = esm(out)
    assert request.id == 1 and request.WhichOneof("message") == "shell_stream_args"
    assert request.exec_id == "toolu_1"
    args = request.shell_stream_args
    assert (args.command, args.working_directory, args.tool_call_id) == (
        "make test",
        "/w",
        "toolu_1",
    )
    assert args.timeout == DEFAULT_BLOCK_UNTIL_MS and args.conversation_id == "conv"
    assert args.close_stdin and args.timeout_behavior == a.TIMEOUT_BEHAVIOR_BACKGROUND
    assert tool.exec_ids == {1}

    assert tool.feed(stream(1, start=a.ShellStreamStart()), T0 + 1) == Send(())
    assert tool.phase is Phase.RUNNING
    frames = sent(tool.feed(stream(1, stdout=a.ShellStreamStdout(data="ok 1\n")), T0 + 2))
    assert len(frames) == 1
    delta = frames[0].interaction_update.tool_call_delta
    assert delta.call_id == "llm1-0" and delta.model_call_id == "conv:1:llm1"
    assert delta.tool_call_delta.shell_tool_call_delta.stdout.content == "ok 1\n"
    assert tool.phase is Phase.RUNNING
    frames = sent(tool.feed(stream(1, stderr=a.ShellStreamStderr(data="warn\n")), T0 + 3))
    shell_delta = frames[0].interaction_update.tool_call_delta.tool_call_delta
    assert shell_delta.shell_tool_call_delta.stderr.content == "warn\n"
    assert tool.phase is Phase.RUNNING
    assert tool.feed(stream(1, exit=a.ShellStreamExit(code=0, cwd="/w")), T0 + 4) == Send(())
    assert tool.phase is Phase.RUNNING and tool.exec_ids == {1}
    result = a.ShellResult(
        success=a.ShellSuccess(
            command="make test",
            working_directory="/w",
            exit_code=0,
            stdout="ok 1\n",
            stderr="warn\n",
        )
    )
    done = finished(tool.feed(reply(1, shell_result=result), T0 + 5))
    assert done.result == ToolResultMessage(
        tool_call_id="toolu_1",
        tool_name="Shell",
        content=(TextContent(text="Exit code: 0\nstdout:\nok 1\n\nstderr:\nwarn\n"),),
    )
    tc = completed(done)
    assert tc.shell_tool_call.args.command == "make test"
    assert tc.shell_tool_call.result.success.stdout == "ok 1\n"
    assert tc.completed_at_ms == T0 + 5
    assert tool.exec_ids == set() and tool.phase is Phase.DONE
    # The stream_close after the result: the call is over, the message is not taken.
    assert "over" in ignored(tool.feed(close(1), T0 + 6))
    assert tool.phase is Phase.DONE


def test_shell_stream_start_and_hook_context_are_taken_with_nothing_to_send() -> None:
    tool, _, _ = start("Shell", {"command": "x"})
    assert tool.feed(stream(1, start=a.ShellStreamStart()), T0) == Send(())
    hook = stream(1, hook_context=a.ShellStreamHookContext())
    assert tool.feed(hook, T0) == Send(())
    assert tool.phase is Phase.RUNNING and tool.exec_ids == {1}


def test_shell_empty_stream_event_is_ignored() -> None:
    tool, _, _ = start("Shell", {"command": "x"})
    assert "shell_stream" in ignored(tool.feed(stream(1), T0))
    assert tool.phase is Phase.RUNNING and tool.exec_ids == {1}


def test_shell_nonzero_exit_from_failure_result_uses_streamed_output() -> None:
    tool, _, _ = start("Shell", {"command": "false", "block_until_ms": 5000})
    tool.feed(stream(1, stdout=a.ShellStreamStdout(data="partial")), T0)
    failure = a.ShellResult(failure=a.ShellFailure(command="false", exit_code=2))
    done = finished(tool.feed(reply(1, shell_result=failure), T0 + 1))
    assert done.result.is_error
    assert done.result.text == "Exit code: 2\nstdout:\npartial"
    assert completed(done).shell_tool_call.result.failure.exit_code == 2


def test_shell_block_until_ms_is_the_background_timeout_in_milliseconds() -> None:
    _, out, _ = start("Shell", {"command": "sleep 1", "block_until_ms": 5000})
    args = esm(out).shell_stream_args
    assert args.timeout == 5000 and args.timeout_behavior == a.TIMEOUT_BEHAVIOR_BACKGROUND
    assert args.hard_timeout == 86_400_000


def test_shell_stream_exit_then_close_without_result() -> None:
    tool, _, _ = start("Shell", {"command": "ls"})
    tool.feed(stream(1, stdout=a.ShellStreamStdout(data="a\n")), T0)
    tool.feed(stream(1, exit=a.ShellStreamExit(code=1)), T0)
    assert tool.phase is Phase.RUNNING
    done = finished(tool.feed(close(1), T0 + 9))
    assert done.result.is_error and done.result.text == "Exit code: 1\nstdout:\na\n"
    assert completed(done).shell_tool_call.result.failure.exit_code == 1
    assert tool.phase is Phase.DONE


def test_shell_stream_exit_zero_then_close_is_a_success() -> None:
    tool, _, _ = start("Shell", {"command": "true", "working_directory": "/w"})
    tool.feed(stream(1, exit=a.ShellStreamExit(code=0)), T0)
    done = finished(tool.feed(close(1), T0 + 1))
    assert not done.result.is_error and done.result.text == "Exit code: 0\n(no output)"
    success = completed(done).shell_tool_call.result.success
    assert (success.command, success.working_directory, success.exit_code) == ("true", "/w", 0)


def test_shell_backgrounded_keeps_what_was_streamed() -> None:
    tool, _, _ = start("Shell", {"command": "serve"})
    tool.feed(stream(1, stdout=a.ShellStreamStdout(data="listening\n")), T0)
    done = finished(tool.feed(stream(1, backgrounded=a.ShellStreamBackgrounded(shell_id=7)), T0))
    assert done.result.text == (
        "The command is still running: it was moved to the background after 30000 ms "
        "(block_until_ms) as shell 7; the client did not say where its output goes. Call "
        'AwaitShell with shell_id "7" to wait for it. The output so far follows.\n'
        "stdout:\nlistening\n"
    )
    assert not done.result.is_error
    result = completed(done).shell_tool_call.result
    assert result.success.stdout == "listening\n" and result.success.shell_id == 7
    assert result.is_background


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
    tool, _, _ = start("Shell", {"command": "x"})
    done = finished(tool.feed(reply(1, shell_result=result), T0 + 1))
    assert done.result.is_error
    assert expect in done.result.text
    assert completed(done).shell_tool_call.result == result


def test_shell_empty_result_is_an_error() -> None:
    tool, _, _ = start("Shell", {"command": "x"})
    done = finished(tool.feed(reply(1, shell_result=a.ShellResult()), T0))
    assert (
        done.result.is_error and done.result.text == "Error: the client sent an empty shell result."
    )
    assert completed(done).shell_tool_call.result.failure.stderr == done.result.text


@pytest.mark.parametrize(
    ("event", "expect"),
    [
        ({"rejected": a.ShellRejected(reason="denied by user")}, "rejected this command"),
        ({"permission_denied": a.ShellPermissionDenied(error="no")}, "permission denied"),
    ],
)
def test_shell_stream_rejections(event: dict[str, Any], expect: str) -> None:
    tool, _, _ = start("Shell", {"command": "rm -rf /"})
    done = finished(tool.feed(stream(1, **event), T0 + 1))
    assert done.result.is_error and expect in done.result.text
    assert completed(done).shell_tool_call.result.WhichOneof("result") == "failure"


def test_shell_long_output_is_cut_with_a_note() -> None:
    tool, _, _ = start("Shell", {"command": "yes"})
    big = "y\n" * 40_000
    result = a.ShellResult(success=a.ShellSuccess(exit_code=0, stdout=big))
    done = finished(tool.feed(reply(1, shell_result=result), T0))
    assert len(done.result.text) < MAX_RESULT_CHARS + 200
    assert "characters omitted" in done.result.text


def test_shell_output_is_not_doubled_when_the_result_repeats_the_stream() -> None:
    tool, _, _ = start("Shell", {"command": "exit 3"})
    tool.feed(stream(1, stdout=a.ShellStreamStdout(data="boom\n")), T0)
    tool.feed(stream(1, exit=a.ShellStreamExit(code=1)), T0)
    failure = a.ShellResult(failure=a.ShellFailure(exit_code=1, stderr="boom\n"))
    done = finished(tool.feed(reply(1, shell_result=failure), T0))
    assert done.result.text == "Exit code: 1\nstderr:\nboom\n"


def test_shell_huge_timeout_is_clamped_not_crashing() -> None:
    _, out, _ = start("Shell", {"command": "x", "block_until_ms": 10**15})
    assert esm(out).shell_stream_args.timeout == 2**31 - 1


def test_shell_wrong_reply_kind_is_an_unexpected_reply() -> None:
    tool, _, _ = start("Shell", {"command": "x"})
    done = finished(tool.feed(reply(1, read_result=a.ReadResult()), T0))
    assert done.result.is_error
    assert done.result.text == (
        "Error: the client answered the Shell call with an unexpected read_result reply."
    )
    assert completed(done).shell_tool_call.result.failure.stderr == done.result.text
