"""The search tools: Grep, and Glob, which the client runs as a grep in files mode.

Grep's arguments are Cursor's ripgrep-style flags (`-A`, `-B`, `-C`, `-i`, `type`, `head_limit`,
`offset`, `multiline`); `grep_args_of` maps each to its `GrepArgs` field. The client runs the
search and applies the limits; the text tells the model when it got only part of the answer.

The protocol has no glob exec: Cursor's own client lists a glob's files for a grep with an
empty pattern in `files_with_matches` mode. Some clients (oh-my-pi) refuse an empty pattern;
Glob then asks once more with "." (files with at least one character, so empty files are not
listed), which is what `Phase.RETRYING` is for. A glob that does not start with `**/` gets it
prepended, as Cursor's tool does, so `*.py` finds Python files at any depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..proto import agent_pb2
from .args import INT32_MAX, get_bool, get_int, get_str, str_or_empty
from .format import clip_middle, format_grep, grep_files
from .machine import Finished, Handlers, Phase, Step, ToolMachine

__all__ = ["GREP_OUTPUT_MODES", "GlobMachine", "GrepMachine", "glob_for_client", "grep_args_of"]

GREP_OUTPUT_MODES = ("content", "files_with_matches", "count")

# The model's integer flags and the GrepArgs field each one sets. The context flags only mean
# something in content mode; in the other modes they are not sent.
_CONTEXT_FLAGS = (("-B", "context_before"), ("-A", "context_after"), ("-C", "context"))
_LIMIT_FLAGS = (("head_limit", "head_limit"), ("offset", "offset"))


def _count(args: Mapping[str, Any], key: str) -> int | None:
    """A non-negative integer flag clamped to int32, or None when absent or invalid."""
    value = get_int(args, key)
    if value is None or value < 0:
        return None
    return min(value, INT32_MAX)


def grep_args_of(args: Mapping[str, Any], tool_call_id: str) -> agent_pb2.GrepArgs:
    """The exec request for the model's Grep arguments (reference §2.8). Unknown or invalid
    values are left out, so the client applies its defaults; `case_insensitive` is the name
    this server's catalogue used before it took Cursor's `-i`, still read for old calls."""
    ga = agent_pb2.GrepArgs(pattern=str_or_empty(args, "pattern"), tool_call_id=tool_call_id)
    for key in ("path", "glob", "type", "sort"):
        value = get_str(args, key)
        if value:
            setattr(ga, key, value)
    mode = get_str(args, "output_mode")
    if mode in GREP_OUTPUT_MODES:
        ga.output_mode = mode
    if mode in (None, "content"):
        for flag, field in _CONTEXT_FLAGS:
            lines = _count(args, flag)
            if lines is not None:
                setattr(ga, field, lines)
    for flag, field in _LIMIT_FLAGS:
        entries = _count(args, flag)
        if entries:  # 0 means "no limit" / "from the start": the default either way
            setattr(ga, field, entries)
    insensitive = get_bool(args, "-i")
    if insensitive is None:
        insensitive = get_bool(args, "case_insensitive")
    if insensitive is not None:
        ga.case_insensitive = insensitive
    multiline = get_bool(args, "multiline")
    if multiline is not None:
        ga.multiline = multiline
    ascending = get_bool(args, "sort_ascending")
    if ascending is not None:
        ga.sort_ascending = ascending
    return ga


def glob_for_client(pattern: str) -> str:
    """The glob the client matches: `**/` in front unless the pattern already starts with it
    or is absolute (Cursor's Glob searches at any depth)."""
    if not pattern or pattern.startswith(("**/", "/")):
        return pattern
    return f"**/{pattern}"


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
        return grep_args_of(self.args, self.tool_call_id)

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        mode = self.args.get("output_mode")
        if mode is not None and mode not in GREP_OUTPUT_MODES:
            return (
                f"Error: output_mode must be one of {', '.join(GREP_OUTPUT_MODES)}; got {mode!r}."
            )
        return None

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
        offset = _count(self.args, "offset") or 0
        return format_grep(result.success, offset=offset)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"grep_result": _SearchMachine._on_grep}}


class GlobMachine(_SearchMachine):
    CARD = "glob_tool_call"
    REQUIRED = ("glob_pattern",)

    def _grep_args(self, pattern: str = "") -> agent_pb2.GrepArgs:
        ga = agent_pb2.GrepArgs(
            pattern=pattern,
            glob=glob_for_client(str_or_empty(self.args, "glob_pattern")),
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
        files, total, client_cut, rg_cut = grep_files(result.success)
        ok = tc.glob_tool_call.result.success
        ok.pattern = glob_for_client(str_or_empty(self.args, "glob_pattern"))
        ok.path = result.success.path or str_or_empty(self.args, "target_directory")
        ok.files.extend(files)
        ok.total_files = min(max(total, len(files)), INT32_MAX)
        ok.client_truncated = client_cut
        ok.ripgrep_truncated = rg_cut
        if not files:
            return "No files matched."
        text = "\n".join(files)
        if client_cut or rg_cut:
            more = f"at least {ok.total_files}" if ok.total_files > len(files) else "more"
            text += (
                f"\n[Showing {len(files)} files; {more} matched. Narrow the pattern or the "
                "directory to see the rest.]"
            )
        return clip_middle(text)

    def _on_first_grep(self, result: agent_pb2.GrepResult, now_ms: int) -> Step:
        if result.HasField("error") and "pattern" in result.error.error.lower():
            return self._next_exec(Phase.RETRYING, "grep_args", self._grep_args(pattern="."))
        return self._on_grep(result, now_ms)

    # A second refusal is final: the retry's answer goes straight to `_on_grep`.
    HANDLERS: ClassVar[Handlers] = {
        Phase.RUNNING: {"grep_result": _on_first_grep},
        Phase.RETRYING: {"grep_result": _SearchMachine._on_grep},
    }
