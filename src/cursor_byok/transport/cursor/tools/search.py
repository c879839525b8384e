"""The search tools: Grep, and Glob, which the client runs as a grep in files mode.

The protocol has no glob exec: Cursor's own client lists a glob's files for a grep with an
empty pattern in `files_with_matches` mode. Some clients (oh-my-pi) refuse an empty pattern;
Glob then asks once more with "." (files with at least one character, so empty files are not
listed), which is what `Phase.RETRYING` is for.
"""

from __future__ import annotations

from typing import ClassVar

from ..proto import agent_pb2
from .args import get_bool, get_str, str_or_empty
from .format import clip_middle, format_grep, grep_files
from .machine import Finished, Handlers, Phase, Step, ToolMachine

__all__ = ["GlobMachine", "GrepMachine"]


class _SearchMachine(ToolMachine):
    """A grep exec and its answer; the families differ in their card."""

    def _grep_args(self) -> agent_pb2.GrepArgs:
        raise NotImplementedError

    def _failed(self, tc: agent_pb2.ToolCall, result: agent_pb2.GrepResult, text: str) -> None:
        """Put the client's error into the card."""
        raise NotImplementedError

    def _found(self, tc: agent_pb2.ToolCall, result: agent_pb2.GrepResult) -> str:
        """Put the client's success into the card and say what was found."""
        raise NotImplementedError

    def _first_exec(self) -> bytes:
        return self._exec("grep_args", self._grep_args())

    def _on_grep(self, result: agent_pb2.GrepResult, now_ms: int) -> Finished:
        match result.WhichOneof("result"):
            case "error":
                text = f"Error: search failed: {result.error.error or 'unknown error'}"
                tc = self._card()
                self._failed(tc, result, text)
                return self._finish(text, tc, now_ms, is_error=True)
            case "success":
                tc = self._card()
                return self._finish(self._found(tc, result), tc, now_ms)
            case _:
                return self._finish_error("Error: the client sent an empty search result.", now_ms)


class GrepMachine(_SearchMachine):
    CARD = "grep_tool_call"
    REQUIRED = ("pattern",)

    def _grep_args(self) -> agent_pb2.GrepArgs:
        ga = agent_pb2.GrepArgs(
            pattern=str_or_empty(self.args, "pattern"), tool_call_id=self.tool_call_id
        )
        for key in ("path", "glob", "output_mode"):
            value = get_str(self.args, key)
            if value:
                setattr(ga, key, value)
        case_insensitive = get_bool(self.args, "case_insensitive")
        if case_insensitive is not None:
            ga.case_insensitive = case_insensitive
        return ga

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.grep_tool_call.args.CopyFrom(self._grep_args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.grep_tool_call.result.error.error = text

    def _failed(self, tc: agent_pb2.ToolCall, result: agent_pb2.GrepResult, text: str) -> None:
        tc.grep_tool_call.result.CopyFrom(result)

    def _found(self, tc: agent_pb2.ToolCall, result: agent_pb2.GrepResult) -> str:
        tc.grep_tool_call.result.CopyFrom(result)
        return format_grep(result.success)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"grep_result": _SearchMachine._on_grep}}


class GlobMachine(_SearchMachine):
    CARD = "glob_tool_call"
    REQUIRED = ("glob_pattern",)

    def _grep_args(self, pattern: str = "") -> agent_pb2.GrepArgs:
        ga = agent_pb2.GrepArgs(
            pattern=pattern,
            glob=str_or_empty(self.args, "glob_pattern"),
            output_mode="files_with_matches",
            tool_call_id=self.tool_call_id,
        )
        target = get_str(self.args, "target_directory")
        if target:
            ga.path = target
        return ga

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        ga = tc.glob_tool_call.args
        ga.glob_pattern = str_or_empty(self.args, "glob_pattern")
        target = get_str(self.args, "target_directory")
        if target:
            ga.target_directory = target
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.glob_tool_call.result.error.error = text

    def _failed(self, tc: agent_pb2.ToolCall, result: agent_pb2.GrepResult, text: str) -> None:
        self._set_error(tc, text)

    def _found(self, tc: agent_pb2.ToolCall, result: agent_pb2.GrepResult) -> str:
        files = grep_files(result.success)
        ok = tc.glob_tool_call.result.success
        ok.pattern = str_or_empty(self.args, "glob_pattern")
        ok.path = result.success.path or str_or_empty(self.args, "target_directory")
        ok.files.extend(files)
        ok.total_files = len(files)
        return clip_middle("\n".join(files)) if files else "No files matched."

    def _on_first_grep(self, result: agent_pb2.GrepResult, now_ms: int) -> Step:
        if result.HasField("error") and "pattern" in result.error.error.lower():
            return self._next_exec(Phase.RETRYING, "grep_args", self._grep_args(pattern="."))
        return self._on_grep(result, now_ms)

    # A second refusal is final: the retry's answer goes straight to `_on_grep`.
    HANDLERS: ClassVar[Handlers] = {
        Phase.RUNNING: {"grep_result": _on_first_grep},
        Phase.RETRYING: {"grep_result": _SearchMachine._on_grep},
    }
