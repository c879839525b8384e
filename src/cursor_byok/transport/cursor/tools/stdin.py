"""WriteShellStdin: characters typed into a background shell's stdin, on the client.

The exec is `write_shell_stdin_args` (23) `{shell_id, chars}`; the client answers
`write_shell_stdin_result` (23) with how long the terminal file was before the input, so the
model can read what the command did next (AwaitShell, or Read from that offset). The tool is
opt-in (`server.enabled_tools`): nothing tells us a client keeps a shell's stdin open, and a
client that does not know the exec answers it with an error or a throw, which the model reads.
"""

from __future__ import annotations

from typing import ClassVar

from ....llm.types import ToolCall
from ..proto import agent_pb2
from .args import get_str
from .machine import Finished, Handlers, Phase, ToolMachine, ToolSettings
from .shell import terminal_file

__all__ = ["MAX_STDIN_CHARS", "WriteShellStdinMachine"]

# What one call may type: a line of input, a pasted answer; never a file (use Write for that).
MAX_STDIN_CHARS = 65_536


class WriteShellStdinMachine(ToolMachine):
    CARD = "write_shell_stdin_tool_call"
    REQUIRED = ("shell_id",)

    def __init__(
        self, tool_call: ToolCall, *, call_id: str, model_call_id: str, settings: ToolSettings
    ) -> None:
        super().__init__(tool_call, call_id=call_id, model_call_id=model_call_id, settings=settings)
        raw = tool_call.arguments.get("shell_id")
        if isinstance(raw, int) and not isinstance(raw, bool):
            self.args["shell_id"] = str(raw)  # a model that wrote the id as a number
        self.shell_id = (get_str(self.args, "shell_id") or "").strip()
        chars = self.args.get("chars")
        self.chars = chars if isinstance(chars, str) else None

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        if not self.shell_id.isdigit() or int(self.shell_id) >= 2**32:
            return (
                f"Error: shell_id must be the number a Shell result named, not {self.shell_id!r}."
            )
        if self.chars is None or self.chars == "":
            return "Error: the WriteShellStdin call needs chars: the characters to type."
        if len(self.chars) > MAX_STDIN_CHARS:
            return (
                f"Error: chars holds {len(self.chars)} characters; at most {MAX_STDIN_CHARS} "
                "can be typed at once."
            )
        return None

    def _args_message(self) -> agent_pb2.WriteShellStdinArgs:
        # The card of an unusable call still needs a uint32: 0 stands for "not a shell id".
        number = int(self.shell_id) if self.shell_id.isdigit() else 0
        return agent_pb2.WriteShellStdinArgs(
            shell_id=number if number < 2**32 else 0, chars=self.chars or ""
        )

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.write_shell_stdin_tool_call.args.CopyFrom(self._args_message())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.write_shell_stdin_tool_call.result.error.error = text

    def _first_exec(self) -> bytes:
        return self._exec("write_shell_stdin_args", self._args_message())

    def _on_result(self, result: agent_pb2.WriteShellStdinResult, now_ms: int) -> Finished:
        match result.WhichOneof("result"):
            case "success":
                tc = self._card()
                tc.write_shell_stdin_tool_call.result.CopyFrom(result)
                before = result.success.terminal_file_length_before_input_written
                where = terminal_file(self.settings.terminals_folder, self.shell_id)
                count = len(self.chars or "")
                text = f"Wrote {count} character(s) to the stdin of shell {self.shell_id}."
                if where is not None:
                    text += (
                        f" Its output goes on in {where} (it was {before} bytes long before "
                        "the input); AwaitShell reads what the command does next."
                    )
                return self._finish(text, tc, now_ms)
            case "error":
                return self._finish_error(
                    f"Error: the client could not write to shell {self.shell_id}: "
                    f"{result.error.error or 'no reason given'}",
                    now_ms,
                )
            case _:
                return self._finish_error(
                    "Error: the client answered WriteShellStdin with an empty result.", now_ms
                )

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"write_shell_stdin_result": _on_result}}
