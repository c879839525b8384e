"""Shell's background behaviour and AwaitShell, as sans-I/O machines: the args sent, the
backgrounded result naming the terminal file, and AwaitShell reading that file on the client
with read_args until the footer, the pattern or the end of the wait."""

from __future__ import annotations

from typing import Any

import pytest

from cursor_byok.llm.types import ToolCall
from cursor_byok.transport.cursor import FollowUp, RunAction
from cursor_byok.transport.cursor import decode as dialect
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import Phase, Send, ToolMachine, machine_for
from cursor_byok.transport.cursor.tools.await_shell import POLL_MS, parse_terminal_file
from tests.cursor.tool_support import (
    T0,
    Ids,
    completed,
    decode,
    esm,
    finished,
    reply,
    sent,
    stream,
)

FOLDER = "/home/u/.cursor/projects/p/terminals"
RUNNING = "---\npid: 4242\ncwd: /w\nrunning_for_ms: 6000\n---\nbooting\nready on :8080\n"
ENDED = RUNNING + "---\nexit_code: 3\nelapsed_ms: 9100\n---\n"


def make(name: str, args: dict[str, Any], **settings: Any) -> ToolMachine:
    return machine_for(
        ToolCall(id="toolu_9", name=name, arguments=args),
        call_id="llm1-0",
        model_call_id="conv:1:llm1",
        conversation_id="conv",
        **settings,
    )


def begin(name: str, args: dict[str, Any], **settings: Any) -> tuple[ToolMachine, list[Any]]:
    tool = make(name, args, **settings)
    started = tool.start(Ids(), T0)
    assert started.early is None, started.early
    return tool, decode(started.frames)


def read_ok(exec_id: int, content: str) -> a.ExecClientMessage:
    return reply(
        exec_id,
        read_result=a.ReadResult(success=a.ReadSuccess(path="x", content=content)),
    )


def test_shell_sends_cursors_parameters() -> None:
    args = {
        "command": "npm run dev",
        "block_until_ms": 0,
        "description": "Start the dev server",
        "notify_on_output": {"pattern": "ready on", "reason": "server up", "debounce_ms": 100},
    }
    _, out = begin("Shell", args)
    sa = esm(out).shell_stream_args
    assert (sa.timeout, sa.timeout_behavior) == (0, a.TIMEOUT_BEHAVIOR_BACKGROUND)
    assert sa.description == "Start the dev server" and sa.close_stdin
    note = sa.output_notification
    assert (note.pattern, note.reason, note.debounce) == ("ready on", "server up", 5000.0)
    card = out[0].interaction_update.tool_call_started.tool_call.shell_tool_call
    assert card.args.output_notification.pattern == "ready on"


def test_shell_retry_after_auto_review_asks_for_approval() -> None:
    args = {
        "command": "rm -rf build",
        "request_smart_mode_approval": True,
        "smart_mode_block_reason": " deletes files ",
    }
    _, out = begin("Shell", args)
    approval = esm(out).shell_stream_args.smart_mode_approval
    assert (approval.request_id, approval.reason) == (esm(out).exec_id, "deletes files")
    assert approval.request_id == esm(out).shell_stream_args.tool_call_id
    card = out[0].interaction_update.tool_call_started.tool_call.shell_tool_call
    assert card.args.smart_mode_approval.reason == "deletes files"
    _, plain = begin("Shell", {"command": "ls", "smart_mode_block_reason": "x"})
    assert not esm(plain).shell_stream_args.HasField("smart_mode_approval")


def test_shell_approval_request_without_its_reason_is_an_argument_error() -> None:
    tool = make("Shell", {"command": "rm x", "request_smart_mode_approval": True})
    started = tool.start(Ids(), T0)
    assert started.early is not None and started.early.result.is_error
    assert "needs smart_mode_block_reason" in started.early.result.text
    assert len(started.frames) == 1  # nothing went to the client


def test_shell_without_usable_notify_sends_none() -> None:
    _, out = begin("Shell", {"command": "x", "notify_on_output": {"pattern": "p"}})
    assert not esm(out).shell_stream_args.HasField("output_notification")


def test_shell_backgrounded_names_the_terminal_file() -> None:
    tool, _ = begin(
        "Shell", {"command": "npm run dev", "block_until_ms": 2000}, terminals_folder=FOLDER
    )
    tool.feed(stream(1, stdout=a.ShellStreamStdout(data="booting\n")), T0)
    bg = a.ShellStreamBackgrounded(
        shell_id=3, pid=4242, ms_to_wait=2000, reason=a.SHELL_BACKGROUND_REASON_TIMEOUT
    )
    done = finished(tool.feed(stream(1, backgrounded=bg), T0 + 2000))
    assert done.result.text == (
        "The command is still running: it was moved to the background after 2000 ms "
        "(block_until_ms) as shell 3 (pid 4242); its output goes on to the terminal file "
        f'{FOLDER}/3.txt. Call AwaitShell with shell_id "3" to wait for it. The output so far '
        "follows.\nstdout:\nbooting\n"
    )
    assert not done.result.is_error
    result = completed(done).shell_tool_call.result
    assert result.is_background and result.terminals_folder == FOLDER
    s = result.success
    assert (s.shell_id, s.pid, s.ms_to_wait, s.background_reason) == (
        3,
        4242,
        2000,
        a.SHELL_BACKGROUND_REASON_TIMEOUT,
    )


def test_shell_background_result_without_stream_event() -> None:
    tool, _ = begin("Shell", {"command": "sleep 99"})
    result = a.ShellResult(
        success=a.ShellSuccess(command="sleep 99", shell_id=5, pid=7),
        is_background=True,
        terminals_folder="/t",
    )
    done = finished(tool.feed(reply(1, shell_result=result), T0))
    assert "as shell 5 (pid 7); its output goes on to the terminal file /t/5.txt" in (
        done.result.text
    )


def test_terminal_file_parsing() -> None:
    running = parse_terminal_file(RUNNING)
    assert (running.output, running.exit_code, running.pid, running.running_for_ms) == (
        "booting\nready on :8080",
        None,
        4242,
        6000,
    )
    ended = parse_terminal_file(ENDED)
    assert (ended.output, ended.exit_code, ended.elapsed_ms) == (
        "booting\nready on :8080",
        3,
        9100,
    )
    plain = parse_terminal_file("just text\n")
    assert (plain.output, plain.exit_code) == ("just text", None)


def test_await_shell_reads_the_terminal_file_until_the_footer() -> None:
    tool, out = begin(
        "AwaitShell", {"shell_id": "3", "block_until_ms": 10_000}, terminals_folder=FOLDER
    )
    card = out[0].interaction_update.tool_call_started.tool_call.await_tool_call
    assert (card.args.task_id, card.args.block_until_ms) == ("3", 10_000)
    first = esm(out)
    assert first.read_args.path == f"{FOLDER}/3.txt" and first.read_args.tool_call_id == "toolu_9"
    step = tool.feed(read_ok(first.id, RUNNING), T0 + 10)
    assert step == Send(wake_after_ms=POLL_MS)
    again = sent(tool.wake(T0 + 1010))
    assert again[0].exec_server_message.read_args.path == f"{FOLDER}/3.txt"
    done = finished(tool.feed(read_ok(again[0].exec_server_message.id, ENDED), T0 + 1020))
    assert done.result.text == (
        "Shell 3: the command ended after waiting 1020 ms.\nFinished. Exit code: 3\n"
        f"Running time: 9100 ms\nOutput ({FOLDER}/3.txt):\nbooting\nready on :8080"
    )
    complete = completed(done).await_tool_call.result.complete
    assert (complete.task_id, complete.exit_code, complete.output_file_path) == (
        "3",
        3,
        f"{FOLDER}/3.txt",
    )


def test_await_shell_pattern_ends_the_wait() -> None:
    tool, out = begin(
        "AwaitShell", {"shell_id": 3, "pattern": "^ready on"}, terminals_folder=FOLDER
    )
    done = finished(tool.feed(read_ok(esm(out).id, RUNNING), T0 + 5))
    assert "the pattern matched" in done.result.text and "Matched: ready on" in done.result.text
    running = completed(done).await_tool_call.result.still_running
    assert running.regex_requested and running.regex_match == "ready on"


def test_await_shell_status_check_and_the_deadline_cut() -> None:
    tool, out = begin("AwaitShell", {"shell_id": "3", "block_until_ms": 0}, terminals_folder=FOLDER)
    done = finished(tool.feed(read_ok(esm(out).id, RUNNING), T0))
    assert done.result.text.startswith(
        "Shell 3: the wait is over after waiting 0 ms.\nStill running"
    )
    cut = make(
        "AwaitShell",
        {"shell_id": "3", "block_until_ms": 7_000_000},
        terminals_folder=FOLDER,
        budget_ms=20_000,
    )
    assert cut.wait_ms == 15_000  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "folder", "expect"),
    [
        ({"shell_id": "abc"}, FOLDER, "shell_id must be the number"),
        ({"shell_id": "3", "pattern": "("}, FOLDER, "pattern is not a valid regular expression"),
        ({"shell_id": "3"}, None, "did not report its terminals folder"),
        ({"block_until_ms": 0}, FOLDER, "needs a shell_id when block_until_ms is 0"),
    ],
)
def test_await_shell_bad_arguments_are_answered_at_once(
    args: dict[str, Any], folder: str | None, expect: str
) -> None:
    tool = make("AwaitShell", args, terminals_folder=folder)
    started = tool.start(Ids(), T0)
    assert started.early is not None and started.early.result.is_error
    assert expect in started.early.result.text
    assert len(started.frames) == 1  # the card only: nothing went to the client


@pytest.mark.parametrize("folder", [FOLDER, None])
def test_await_shell_without_a_shell_only_waits(folder: str | None) -> None:
    tool = make("AwaitShell", {"block_until_ms": 2500}, terminals_folder=folder)
    started = tool.start(Ids(), T0)
    assert started.early is None and started.wake_after_ms == 2500
    assert len(started.frames) == 1  # the card only: nothing is polled
    assert tool.phase is Phase.SLEEPING and tool.exec_ids == frozenset()
    done = finished(tool.wake(T0 + 2510))
    assert done.result.text == "Waited 2510 ms (no shell_id: nothing was polled)."
    assert not done.result.is_error
    complete = completed(done).await_tool_call.result.complete
    assert (complete.runtime_ms, complete.wake_reason) == (2510, "the wait is over")
    assert not completed(done).await_tool_call.args.task_id


def test_await_shell_without_a_shell_takes_the_default_wait() -> None:
    started = make("AwaitShell", {}, terminals_folder=FOLDER).start(Ids(), T0)
    assert started.wake_after_ms == 30_000


def test_await_shell_unknown_shell() -> None:
    tool, out = begin("AwaitShell", {"shell_id": "8"}, terminals_folder=FOLDER)
    missing = reply(esm(out).id, read_result=a.ReadResult(file_not_found=a.ReadFileNotFound()))
    done = finished(tool.feed(missing, T0))
    assert done.result.is_error and "no terminal file" in done.result.text
    assert completed(done).await_tool_call.result.error.error.startswith("Error: shell 8")


# -- the background actions, decoded ----------------------------------------------------------


def _completion() -> a.BackgroundTaskCompletionAction:
    action = a.BackgroundTaskCompletionAction()
    c = action.completions.add(
        task_id="4", kind=a.BACKGROUND_TASK_KIND_SHELL, status=a.BACKGROUND_TASK_STATUS_SUCCESS
    )
    c.reason = a.BACKGROUND_TASK_COMPLETION_REASON_TASK_FINISHED
    return action


def test_background_actions_start_runs_with_a_notice() -> None:
    req = a.AgentRunRequest(conversation_id="c")
    req.action.background_task_completion_action.CopyFrom(_completion())
    req.action.request_context_parts.dynamic_context.env.terminals_folder = FOLDER
    r = dialect.decode_run_request(req)
    assert r.action == RunAction.BACKGROUND_TASK_COMPLETION and r.user_message is not None
    assert r.user_message.text == (
        "[Notice from the client, not typed by the user: background work changed.]\n"
        "- Background shell 4 finished successfully.\n"
        'Use AwaitShell (block_until_ms 0) on shell_id "4" to read the final output, then '
        "carry on with the task."
    )
    assert r.inline_context is not None and r.inline_context.environment is not None
    assert r.inline_context.environment.terminals_folder == FOLDER
    req = a.AgentRunRequest(conversation_id="c")
    req.action.background_shell_action.tool_call_id = "toolu_5"
    r = dialect.decode_run_request(req)
    assert r.action == RunAction.BACKGROUND_SHELL and r.user_message is not None
    assert "Shell call toolu_5 to the background" in r.user_message.text


def test_a_completion_on_a_running_run_is_a_follow_up() -> None:
    action = a.ConversationAction(background_task_completion_action=_completion())
    ev = dialect.decode_client_message(a.AgentClientMessage(conversation_action=action))
    assert isinstance(ev, FollowUp)
    assert ev.message.text.startswith("[Notice from the client")
