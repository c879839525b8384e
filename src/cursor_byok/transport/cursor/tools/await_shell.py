"""AwaitShell: follow a background command by reading its terminal file on the client.

The file is `<terminals_folder>/<shell_id>.txt` on the user's machine, read with `read_args`
like any file: never from the server's own disk, which may be another machine. The read is
repeated every `POLL_MS` until the file's footer says the command ended, the model's pattern
matches the output, or the wait is over; between two reads the call sleeps (`Send` with
`wake_after_ms`) and the caller wakes it. The wait is cut to stay inside the runner's tool
deadline.

The file's layout is what the reference reports [S]: a `---` delimited header (`pid`, `cwd`,
`command`, `running_for_ms`, ...), the output, and once the command ended a footer block with
`exit_code` (and `elapsed_ms`). A file that does not look like that is read as output of a
command still running, never as an error.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import ClassVar

from ....llm.types import ToolCall
from ....loop.tools import DEFAULT_BLOCK_UNTIL_MS, MAX_AWAIT_MS
from ..proto import agent_pb2
from .args import get_int, get_str
from .files import read_failure, read_text
from .format import clip_middle
from .machine import Finished, Handlers, Phase, Step, ToolMachine, ToolSettings
from .shell import terminal_file

__all__ = ["MAX_AWAIT_MS", "POLL_MS", "AwaitShellMachine", "TerminalFile", "parse_terminal_file"]

# How often the terminal file is read again while the wait goes on.
POLL_MS = 1_000
# Time kept free under the runner's tool deadline for the last read and its answer.
DEADLINE_MARGIN_MS = 5_000
DEFAULT_AWAIT_MS = DEFAULT_BLOCK_UNTIL_MS


@dataclass(frozen=True, slots=True)
class TerminalFile:
    output: str
    exit_code: int | None  # set once the footer is there: the command ended
    pid: int | None = None
    running_for_ms: int | None = None
    elapsed_ms: int | None = None


def _meta(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def _int(meta: dict[str, str], key: str) -> int | None:
    value = meta.get(key, "")
    try:
        return int(value)
    except ValueError:
        return None


def parse_terminal_file(text: str) -> TerminalFile:
    lines = text.replace("\r\n", "\n").split("\n")
    seps = [i for i, line in enumerate(lines) if line.strip() == "---"]
    header: dict[str, str] = {}
    start = 0
    if len(seps) >= 2 and seps[0] == 0:
        header = _meta(lines[1 : seps[1]])
        start = seps[1] + 1
    end = len(lines)
    footer: dict[str, str] = {}
    later = [i for i in seps if i >= start]
    for a, b in itertools.pairwise(later):
        block = _meta(lines[a + 1 : b])
        if "exit_code" in block or "ended_at" in block:
            footer, end = block, a
            break
    output = "\n".join(lines[start:end]).rstrip("\n")
    exit_code = _int(footer, "exit_code") if footer else None
    if footer and exit_code is None:
        exit_code = -1  # ended, with no readable code
    return TerminalFile(
        output=output,
        exit_code=exit_code,
        pid=_int(header, "pid"),
        running_for_ms=_int(header, "running_for_ms"),
        elapsed_ms=_int(footer, "elapsed_ms") if footer else None,
    )


class AwaitShellMachine(ToolMachine):
    CARD = "await_tool_call"

    def __init__(
        self, tool_call: ToolCall, *, call_id: str, model_call_id: str, settings: ToolSettings
    ) -> None:
        super().__init__(tool_call, call_id=call_id, model_call_id=model_call_id, settings=settings)
        raw = tool_call.arguments.get("shell_id")
        if isinstance(raw, int) and not isinstance(raw, bool):
            self.args["shell_id"] = str(raw)  # a model that wrote the id as a number
        self.shell_id = (get_str(self.args, "shell_id") or "").strip()
        self.path = terminal_file(settings.terminals_folder, self.shell_id)
        self.pattern_text = get_str(self.args, "pattern") or None
        wait = get_int(self.args, "block_until_ms")
        wait = DEFAULT_AWAIT_MS if wait is None or wait < 0 else min(wait, MAX_AWAIT_MS)
        if settings.budget_ms is not None:
            wait = min(wait, max(settings.budget_ms - DEADLINE_MARGIN_MS, 0))
        self.wait_ms = wait

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        if not self.shell_id:
            if self.wait_ms <= 0:
                return (
                    "Error: the AwaitShell call needs a shell_id when block_until_ms is 0 (a "
                    "status check of nothing); pass the id a Shell result named, or a wait."
                )
            return None  # no shell: the call only waits
        if not self.shell_id.isdigit():
            return (
                f"Error: shell_id must be the number a Shell result named, not {self.shell_id!r}."
            )
        if self.pattern_text is not None:
            try:
                re.compile(self.pattern_text, re.MULTILINE)
            except re.error as exc:
                return f"Error: pattern is not a valid regular expression: {exc}"
        if self.path is None:
            return (
                "Error: the client did not report its terminals folder, so the output of shell "
                f"{self.shell_id} cannot be read here."
            )
        return None

    def _args_message(self) -> agent_pb2.AwaitArgs:
        args = agent_pb2.AwaitArgs(task_id=self.shell_id, block_until_ms=self.wait_ms)
        if self.pattern_text is not None:
            args.regex = self.pattern_text
        return args

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.await_tool_call.args.CopyFrom(self._args_message())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.await_tool_call.result.error.error = text

    def _read(self) -> agent_pb2.ReadArgs:
        return agent_pb2.ReadArgs(path=self.path or "", tool_call_id=self.tool_call_id)

    def _first_exec(self) -> bytes:
        return self._exec("read_args", self._read())

    def _opening_wait(self) -> int | None:
        return self.wait_ms if not self.shell_id else None

    def _on_wake(self, now_ms: int) -> Step:
        if not self.shell_id:
            return self._slept(now_ms)
        return self._next_exec(Phase.RUNNING, "read_args", self._read())

    def _slept(self, now_ms: int) -> Finished:
        """The end of a wait on no shell (the model only wanted time to pass)."""
        waited = now_ms - (self.started_at_ms if self.started_at_ms is not None else now_ms)
        tc = self._card()
        tc.await_tool_call.result.complete.CopyFrom(
            agent_pb2.AwaitTaskComplete(runtime_ms=max(waited, 0), wake_reason="the wait is over")
        )
        return self._finish(f"Waited {waited} ms (no shell_id: nothing was polled).", tc, now_ms)

    def _on_read(self, result: agent_pb2.ReadResult, now_ms: int) -> Step:
        path = self.path or ""
        if result.WhichOneof("result") == "file_not_found":
            return self._finish_error(
                f"Error: shell {self.shell_id} has no terminal file at {path}: no background "
                "command with this id is known to the client.",
                now_ms,
            )
        failure = read_failure(result, path)
        if failure is not None:
            return self._finish_error(failure, now_ms)
        text = read_text(result.success)
        if text is None:
            return self._finish_error(f"Error: {path} is not a text file.", now_ms)
        terminal = parse_terminal_file(text)
        waited = now_ms - (self.started_at_ms if self.started_at_ms is not None else now_ms)
        if terminal.exit_code is not None:
            return self._report(terminal, waited, now_ms, "the command ended")
        if self.pattern_text is not None:
            match = re.search(self.pattern_text, terminal.output, re.MULTILINE)
            if match is not None:
                return self._report(terminal, waited, now_ms, "the pattern matched", match[0])
        if waited + POLL_MS > self.wait_ms:
            return self._report(terminal, waited, now_ms, "the wait is over")
        return self._sleep(POLL_MS)

    def _report(
        self,
        terminal: TerminalFile,
        waited: int,
        now_ms: int,
        wake: str,
        matched: str | None = None,
    ) -> Finished:
        tc = self._card()
        runtime = terminal.elapsed_ms or terminal.running_for_ms or 0
        common = {
            "task_id": self.shell_id,
            "runtime_ms": max(runtime, 0),
            "output_file_path": self.path or "",
            "output_length": len(terminal.output),
            "regex_requested": self.pattern_text is not None,
            "wake_reason": wake,
        }
        if matched is not None:
            common["regex_match"] = matched
        lines = [f"Shell {self.shell_id}: {wake} after waiting {waited} ms."]
        if terminal.exit_code is not None:
            tc.await_tool_call.result.complete.CopyFrom(
                agent_pb2.AwaitTaskComplete(exit_code=terminal.exit_code, **common)  # type: ignore[arg-type]
            )
            lines.append(f"Finished. Exit code: {terminal.exit_code}")
        else:
            tc.await_tool_call.result.still_running.CopyFrom(
                agent_pb2.AwaitTaskStillRunning(**common)  # type: ignore[arg-type]
            )
            lines.append("Still running in the background.")
        if runtime:
            lines.append(f"Running time: {runtime} ms")
        if matched is not None:
            lines.append(f"Matched: {matched}")
        lines.append(f"Output ({self.path}):")
        lines.append(clip_middle(terminal.output) if terminal.output else "(no output yet)")
        return self._finish("\n".join(lines), tc, now_ms)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"read_result": _on_read}}
