"""Shell: one `shell_stream_args` exec, answered by a stream of output chunks and a result.

The client streams `start`, `stdout`/`stderr` chunks and `exit`, then usually a `shell_result`
and a `stream_close`. Each chunk is forwarded to the IDE card as it comes. Some clients send
no result: a stream that closes after `exit` is the result.

The command is sent with Cursor's background behaviour: `timeout` is the model's
`block_until_ms` and `timeout_behavior` BACKGROUND, so a client that backgrounds (the IDE)
answers `backgrounded` once that time is up and the command goes on writing to its terminal
file. The call ends there: a long command never holds the turn past its block time. A client
that runs every command to completion (oh-my-pi) simply answers later; the runner's tool
deadline bounds that wait.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from ....llm.types import ToolCall
from ..proto import agent_pb2
from .args import INT32_MAX, get_bool, get_int, get_str, str_or_empty
from .cards import shell_delta_frame
from .format import format_shell
from .machine import Finished, Handlers, Ignored, Phase, Send, Step, ToolMachine, ToolSettings

__all__ = ["HARD_TIMEOUT_MS", "MIN_NOTIFY_DEBOUNCE_MS", "ShellMachine", "terminal_file"]

# The client's own limit on a backgrounded command (Cursor's: one day), in milliseconds.
HARD_TIMEOUT_MS = 86_400_000
# notify_on_output's least gap between two notifications, as Cursor's tool states it.
MIN_NOTIFY_DEBOUNCE_MS = 5_000


def terminal_file(folder: str | None, shell_id: int | str) -> str | None:
    """`<terminals_folder>/<shell_id>.txt`, the file a background command's output goes to
    (None when the client did not say where its terminals folder is)."""
    if not folder:
        return None
    return f"{folder.rstrip('/')}/{shell_id}.txt"


def block_until_ms(args: dict[str, object], default: int) -> int:
    """The model's block_until_ms: 0 or more, clamped to int32; `default` when absent or bad."""
    value = get_int(args, "block_until_ms")
    if value is None or value < 0:
        return default
    return min(value, INT32_MAX)


def notification(args: dict[str, object]) -> agent_pb2.ShellOutputNotificationConfig | None:
    """notify_on_output as the client's config, or None when the model gave no usable one."""
    raw = args.get("notify_on_output")
    if not isinstance(raw, dict):
        return None
    pattern, reason = get_str(raw, "pattern"), get_str(raw, "reason")
    if not pattern or reason is None:
        return None
    config = agent_pb2.ShellOutputNotificationConfig(pattern=pattern, reason=reason)
    debounce = get_int(raw, "debounce_ms")
    config.debounce = float(max(debounce or MIN_NOTIFY_DEBOUNCE_MS, MIN_NOTIFY_DEBOUNCE_MS))
    return config


class ShellMachine(ToolMachine):
    CARD = "shell_tool_call"
    REQUIRED = ("command",)

    def __init__(
        self, tool_call: ToolCall, *, call_id: str, model_call_id: str, settings: ToolSettings
    ) -> None:
        super().__init__(tool_call, call_id=call_id, model_call_id=model_call_id, settings=settings)
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._exit: agent_pb2.ShellStreamExit | None = None

    def _shell_args(self) -> agent_pb2.ShellArgs:
        # ShellArgs.timeout is milliseconds in Cursor's protocol: the time before the command
        # moves to the background. The oh-my-pi client reads it as seconds and never
        # backgrounds, which only makes its limit longer (0 means none to it); the runner's
        # tool deadline still bounds the call. See docs/dialect.md.
        args = agent_pb2.ShellArgs(
            command=str_or_empty(self.args, "command"),
            working_directory=str_or_empty(self.args, "working_directory"),
            timeout=block_until_ms(self.args, self.settings.shell_block_ms),
            tool_call_id=self.tool_call_id,
            timeout_behavior=agent_pb2.TIMEOUT_BEHAVIOR_BACKGROUND,
            hard_timeout=HARD_TIMEOUT_MS,
            close_stdin=not self.settings.keep_stdin,
            conversation_id=self.settings.conversation_id,
        )
        description = get_str(self.args, "description")
        if description:
            args.description = description
        notify = notification(self.args)
        if notify is not None:
            args.output_notification.CopyFrom(notify)
        if get_bool(self.args, "request_smart_mode_approval"):
            args.smart_mode_approval.CopyFrom(
                agent_pb2.SmartModeApproval(
                    request_id=self.tool_call_id,
                    reason=str_or_empty(self.args, "smart_mode_block_reason").strip(),
                )
            )
        return args

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if (
            problem is None
            and get_bool(self.args, "request_smart_mode_approval")
            and not str_or_empty(self.args, "smart_mode_block_reason").strip()
        ):
            return (
                "Error: request_smart_mode_approval needs smart_mode_block_reason: the reason "
                "Auto-review gave when it blocked the command."
            )
        return problem

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.shell_tool_call.args.CopyFrom(self._shell_args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.shell_tool_call.result.failure.CopyFrom(
            agent_pb2.ShellFailure(
                command=str_or_empty(self.args, "command"),
                working_directory=str_or_empty(self.args, "working_directory"),
                exit_code=1,
                stderr=text,
            )
        )

    def _first_exec(self) -> bytes:
        return self._exec("shell_stream_args", self._shell_args())

    # -- replies ---------------------------------------------------------------------------

    def _on_stream(self, stream: agent_pb2.ShellStream, now_ms: int) -> Step:
        match stream.WhichOneof("event"):
            case "stdout":
                self._stdout.append(stream.stdout.data)
                return Send((self._delta("stdout", stream.stdout.data),))
            case "stderr":
                self._stderr.append(stream.stderr.data)
                return Send((self._delta("stderr", stream.stderr.data),))
            case "exit":
                self._exit = stream.exit  # the result (or the stream's close) follows
                return Send()
            case "start" | "hook_context":
                return Send()
            case "rejected":
                reason = stream.rejected.reason or "no reason given"
                return self._finish_error(f"The user rejected this command: {reason}", now_ms)
            case "permission_denied":
                error = stream.permission_denied.error or "permission denied"
                return self._finish_error(f"Error: permission denied: {error}", now_ms)
            case "backgrounded":
                b = stream.backgrounded
                return self._backgrounded(
                    b.shell_id,
                    b.pid if b.HasField("pid") else None,
                    b.reason if b.HasField("reason") else None,
                    self.settings.terminals_folder,
                    now_ms,
                )
            case _:
                return Ignored("an empty shell_stream event")

    def _on_result(self, result: agent_pb2.ShellResult, now_ms: int) -> Finished:
        tc = self._card()
        tc.shell_tool_call.result.CopyFrom(result)
        match result.WhichOneof("result"):
            case "success":
                s = result.success
                if result.is_background and s.HasField("shell_id"):
                    # A client that answers the background move with its result alone.
                    if s.stdout or s.stderr:
                        self._stdout, self._stderr = [s.stdout], [s.stderr]
                    folder = result.terminals_folder or self.settings.terminals_folder
                    return self._backgrounded(
                        s.shell_id,
                        s.pid if s.HasField("pid") else None,
                        s.background_reason if s.HasField("background_reason") else None,
                        folder,
                        now_ms,
                    )
                return self._done(tc, s.exit_code, *self._output(s.stdout, s.stderr), now_ms)
            case "failure":
                f = result.failure
                note = None
                if f.aborted:
                    reason = (
                        agent_pb2.ShellAbortReason.Name(f.abort_reason)
                        if f.HasField("abort_reason")
                        else "aborted"
                    )
                    why = reason.removeprefix("SHELL_ABORT_REASON_").lower()
                    note = f"The command was aborted ({why})."
                stdout, stderr = self._output(f.stdout, f.stderr)
                return self._done(tc, f.exit_code, stdout, stderr, now_ms, note=note, error=True)
            case "timeout":
                note = (
                    f"The command timed out after {result.timeout.timeout_ms} ms and was stopped."
                )
                return self._done(tc, None, *self._streamed(), now_ms, note=note, error=True)
            case "rejected":
                reason = result.rejected.reason or "no reason given"
                text = f"The user rejected this command: {reason}"
                return self._finish(text, tc, now_ms, is_error=True)
            case "spawn_error":
                text = f"Error: the command could not be started: {result.spawn_error.error}"
                return self._finish(text, tc, now_ms, is_error=True)
            case "permission_denied":
                error = result.permission_denied.error or "no details"
                return self._finish(f"Error: permission denied: {error}", tc, now_ms, is_error=True)
            case _:
                return self._finish_error("Error: the client sent an empty shell result.", now_ms)

    def _on_stream_close(self, now_ms: int) -> Finished:
        if self._exit is None:
            return super()._on_stream_close(now_ms)
        return self._done(None, self._exit.code, *self._streamed(), now_ms)

    HANDLERS: ClassVar[Handlers] = {
        Phase.RUNNING: {"shell_stream": _on_stream, "shell_result": _on_result},
    }

    # -- helpers ---------------------------------------------------------------------------

    def _backgrounded(
        self,
        shell_id: int,
        pid: int | None,
        reason: int | None,
        folder: str | None,
        now_ms: int,
    ) -> Finished:
        """The command goes on in the background: the call ends now, naming its shell id and
        terminal file so the model can follow it with AwaitShell."""
        tc = self._card()
        args = tc.shell_tool_call.args
        stdout, stderr = self._streamed()
        success = agent_pb2.ShellSuccess(
            command=args.command,
            working_directory=args.working_directory,
            stdout=stdout,
            stderr=stderr,
            shell_id=shell_id,
            ms_to_wait=args.timeout,
        )
        if pid is not None:
            success.pid = pid
        if reason is not None:
            success.background_reason = reason  # type: ignore[assignment]
        tc.shell_tool_call.result.success.CopyFrom(success)
        tc.shell_tool_call.result.is_background = True
        if folder:
            tc.shell_tool_call.result.terminals_folder = folder
        path = terminal_file(folder, shell_id)
        why = (
            "at the user's request"
            if reason == agent_pb2.SHELL_BACKGROUND_REASON_USER_REQUEST
            else f"after {args.timeout} ms (block_until_ms)"
        )
        where = (
            f"its output goes on to the terminal file {path}"
            if path is not None
            else "the client did not say where its output goes"
        )
        note = (
            f"The command is still running: it was moved to the background {why} as shell "
            f"{shell_id}{f' (pid {pid})' if pid else ''}; {where}. Call AwaitShell with "
            f'shell_id "{shell_id}" to wait for it. The output so far follows.'
        )
        text = format_shell(None, stdout, stderr, note)
        return self._finish(text, tc, now_ms)

    def _delta(self, stream: Literal["stdout", "stderr"], data: str) -> bytes:
        return shell_delta_frame(self.call_id, self.model_call_id, stream, data)

    def _streamed(self) -> tuple[str, str]:
        return "".join(self._stdout), "".join(self._stderr)

    def _output(self, stdout: str, stderr: str) -> tuple[str, str]:
        """The result's own output when it has any, else what was streamed (never both: clients
        repeat the streamed text in the result)."""
        if stdout or stderr:
            return stdout, stderr
        return self._streamed()

    def _done(
        self,
        tc: agent_pb2.ToolCall | None,
        exit_code: int | None,
        stdout: str,
        stderr: str,
        now_ms: int,
        *,
        note: str | None = None,
        error: bool = False,
    ) -> Finished:
        if tc is None:  # finished from the stream alone: build the typed result here
            tc = self._card()
            args = tc.shell_tool_call.args
            if exit_code is not None and exit_code != 0:
                tc.shell_tool_call.result.failure.CopyFrom(
                    agent_pb2.ShellFailure(
                        command=args.command,
                        working_directory=args.working_directory,
                        exit_code=exit_code,
                        stdout=stdout,
                        stderr=stderr,
                    )
                )
            else:
                tc.shell_tool_call.result.success.CopyFrom(
                    agent_pb2.ShellSuccess(
                        command=args.command,
                        working_directory=args.working_directory,
                        exit_code=exit_code or 0,
                        stdout=stdout,
                        stderr=stderr,
                    )
                )
        text = format_shell(exit_code, stdout, stderr, note)
        failed = error or (exit_code is not None and exit_code != 0)
        return self._finish(text, tc, now_ms, is_error=failed)
