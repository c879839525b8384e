"""Native tool calls executed on the Cursor client: a sans-I/O state machine per tool call.

`ToolExecution` turns one `llm.ToolCall` into `tool_call_started` + exec requests, reads the
client's exec replies (`feed`), and ends with a `Finished`: the `ToolResultMessage` the model
reads, plus a `tool_call_completed` carrying the typed ToolCall with args, result and
timestamps (without it the IDE card spins). Nothing here does I/O or reads a clock: exec ids
come from the caller's allocator and every timestamp is passed in.

Mapping (docs/dialect.md has the full tables):

    Shell       shell_stream_args                 ToolCall.shell_tool_call
    Read        read_args                         ToolCall.read_tool_call
    Write       write_args                        ToolCall.edit_tool_call
    StrReplace  read_args, then write_args        ToolCall.edit_tool_call
    Delete      delete_args                       ToolCall.delete_tool_call
    LS          ls_args                           ToolCall.ls_tool_call
    Grep        grep_args                         ToolCall.grep_tool_call
    Glob        grep_args (files_with_matches)    ToolCall.glob_tool_call
    MCP tools   mcp_args                          ToolCall.mcp_tool_call
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
    json_format,
    struct_pb2,
)

from ..llm.types import ImageContent, TextContent, ToolCall, ToolResultMessage, UserContent
from ..loop.tools import NATIVE_TOOL_NAMES
from .context import McpIndex, McpTool
from .cursor.proto import agent_pb2

__all__ = [
    "DEFAULT_SHELL_TIMEOUT_MS",
    "MAX_RESULT_CHARS",
    "Finished",
    "Send",
    "Step",
    "ToolExecution",
    "clip_middle",
    "format_grep",
    "format_ls",
    "format_read",
    "format_shell",
    "placeholder_tool_call",
    "sanitize_tool_call_id",
]

# The Shell tool's default limit when the model gives none (milliseconds on the wire, see
# `_shell_args`); the runner's own tool deadline bounds every exec anyway.
DEFAULT_SHELL_TIMEOUT_MS = 120_000
# Longest tool result text the model reads; longer output is cut with a note.
MAX_RESULT_CHARS = 30_000

_ID_BAD = re.compile(r"[^a-zA-Z0-9_-]")
_INT32_MAX = 2**31 - 1

_NATIVE_KIND = {
    "Shell": "shell",
    "Read": "read",
    "Write": "write",
    "StrReplace": "str_replace",
    "Delete": "delete",
    "LS": "ls",
    "Grep": "grep",
    "Glob": "glob",
}
assert set(_NATIVE_KIND) == set(NATIVE_TOOL_NAMES)


def sanitize_tool_call_id(tool_call_id: str) -> str:
    """The model's tool call id in Cursor's charset `^[a-zA-Z0-9_-]+$`. Ids that needed changes
    get a short hash suffix, so two different ids never map to the same one."""
    clean = _ID_BAD.sub("_", tool_call_id)
    if clean == tool_call_id and clean:
        return clean
    digest = hashlib.sha256(tool_call_id.encode()).hexdigest()[:8]
    return f"{clean or 'call'}_{digest}"


@dataclass(frozen=True, slots=True)
class Send:
    """Messages to send now; the execution goes on (may be empty)."""

    messages: list[agent_pb2.AgentServerMessage] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Finished:
    """The call is over: `result` goes to the loop, `completed` (if any) to the client."""

    result: ToolResultMessage
    completed: agent_pb2.AgentServerMessage | None


Step = Send | Finished


# -- result text ------------------------------------------------------------------------------


def clip_middle(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """Keep the head and the tail of a long text (errors are usually at the end)."""
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def format_shell(exit_code: int | None, stdout: str, stderr: str, note: str | None = None) -> str:
    lines: list[str] = []
    if note:
        lines.append(note)
    if exit_code is not None:
        lines.append(f"Exit code: {exit_code}")
    budget = MAX_RESULT_CHARS
    if stdout and stderr:
        share = max(budget - min(len(stderr), budget // 3), budget // 2)
        out = clip_middle(stdout, share)
        err = clip_middle(stderr, budget - len(out))
        lines.append(f"stdout:\n{out}")
        lines.append(f"stderr:\n{err}")
    elif stdout:
        lines.append(f"stdout:\n{clip_middle(stdout, budget)}")
    elif stderr:
        lines.append(f"stderr:\n{clip_middle(stderr, budget)}")
    else:
        lines.append("(no output)")
    return "\n".join(lines)


def format_read(content: str, *, first_line: int = 1, total_lines: int | None = None) -> str:
    """Numbered lines (`     1\\tfirst line`), cut at a line boundary past the size limit."""
    if content == "":
        return "(the file is empty)" if first_line <= 1 else "(no lines in this range)"
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[str] = []
    size = 0
    shown = 0
    for i, line in enumerate(lines):
        numbered = f"{first_line + i:>6}\t{line}"
        if size + len(numbered) + 1 > MAX_RESULT_CHARS and out:
            break
        out.append(numbered)
        size += len(numbered) + 1
        shown += 1
    text = "\n".join(out)
    last = first_line + shown - 1
    total = total_lines if total_lines and total_lines >= last else None
    if shown < len(lines):
        of = f" of {total}" if total else ""
        text += (
            f"\n[Showing lines {first_line}-{last}{of}; the rest was cut at "
            f"{MAX_RESULT_CHARS} characters. Read on with offset={last + 1}.]"
        )
    elif total and last < total:
        text += f"\n[Showing lines {first_line}-{last} of {total}. Read on with offset={last + 1}.]"
    return text


def format_ls(root: agent_pb2.LsDirectoryTreeNode) -> str:
    out: list[str] = []

    def visit(node: agent_pb2.LsDirectoryTreeNode, depth: int, name: str) -> None:
        pad = "  " * depth
        out.append(f"{pad}{name.rstrip('/')}/")
        if (
            depth > 0
            and not node.children_were_processed
            and not (node.children_dirs or node.children_files)
        ):
            if node.num_files:
                out.append(f"{pad}  [{node.num_files} files, not listed]")
            return
        for child in sorted(node.children_dirs, key=lambda n: n.abs_path):
            visit(child, depth + 1, child.abs_path.rstrip("/").rsplit("/", 1)[-1])
        for f in sorted(node.children_files, key=lambda f: f.name):
            out.append(f"{pad}  {f.name}")

    visit(root, 0, root.abs_path or ".")
    if len(out) == 1:
        out.append("  (empty directory)")
    return clip_middle("\n".join(out))


def _union_text(union: agent_pb2.GrepUnionResult, prefix: str) -> tuple[list[str], bool]:
    lines: list[str] = []
    kind = union.WhichOneof("result")
    truncated = False
    if kind == "files":
        lines.extend(prefix + f for f in union.files.files)
        truncated = union.files.client_truncated or union.files.ripgrep_truncated
    elif kind == "count":
        lines.extend(f"{prefix}{c.file}: {c.count}" for c in union.count.counts)
        truncated = union.count.client_truncated or union.count.ripgrep_truncated
    elif kind == "content":
        for fm in union.content.matches:
            lines.append(f"{prefix}{fm.file}:")
            for m in fm.matches:
                sep = "-" if m.is_context_line else ":"
                cut = " [line truncated]" if m.content_truncated else ""
                lines.append(f"  {m.line_number}{sep} {m.content}{cut}")
        truncated = union.content.client_truncated or union.content.ripgrep_truncated
    return lines, truncated


def format_grep(success: agent_pb2.GrepSuccess, *, files_only_label: str = "No matches.") -> str:
    lines: list[str] = []
    truncated = False
    keys = sorted(success.workspace_results)
    for key in keys:
        prefix = ""
        part, cut = _union_text(success.workspace_results[key], prefix)
        lines.extend(part)
        truncated = truncated or cut
    if success.HasField("active_editor_result") and not keys:
        part, cut = _union_text(success.active_editor_result, "")
        lines.extend(part)
        truncated = truncated or cut
    if not lines:
        return files_only_label
    text = "\n".join(lines)
    if truncated:
        text += "\n[Results were truncated by the client; narrow the search to see more.]"
    return clip_middle(text)


def _grep_files(success: agent_pb2.GrepSuccess) -> list[str]:
    files: list[str] = []
    for key in sorted(success.workspace_results):
        union = success.workspace_results[key]
        if union.WhichOneof("result") == "files":
            files.extend(union.files.files)
        elif union.WhichOneof("result") == "content":
            files.extend(m.file for m in union.content.matches)
        elif union.WhichOneof("result") == "count":
            files.extend(c.file for c in union.count.counts)
    return files


# -- typed ToolCall placeholders (partial_tool_call) --------------------------------------------


def placeholder_tool_call(name: str, tool_call_id: str) -> agent_pb2.ToolCall:
    """The empty typed ToolCall the IDE draws a card for while the arguments stream."""
    tc = agent_pb2.ToolCall(tool_call_id=sanitize_tool_call_id(tool_call_id))
    kind = _NATIVE_KIND.get(name)
    if kind == "shell":
        tc.shell_tool_call.SetInParent()
    elif kind == "read":
        tc.read_tool_call.SetInParent()
    elif kind in ("write", "str_replace"):
        tc.edit_tool_call.SetInParent()
    elif kind == "delete":
        tc.delete_tool_call.SetInParent()
    elif kind == "ls":
        tc.ls_tool_call.SetInParent()
    elif kind == "grep":
        tc.grep_tool_call.SetInParent()
    elif kind == "glob":
        tc.glob_tool_call.SetInParent()
    else:
        tc.mcp_tool_call.args.name = name
        tc.mcp_tool_call.args.tool_name = name
    return tc


# -- argument helpers ---------------------------------------------------------------------------


def _str(args: Mapping[str, Any], key: str) -> str | None:
    value = args.get(key)
    return value if isinstance(value, str) else None


def _int(args: Mapping[str, Any], key: str) -> int | None:
    value = args.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _bool(args: Mapping[str, Any], key: str) -> bool | None:
    value = args.get(key)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


_REQUIRED: dict[str, tuple[str, ...]] = {
    "shell": ("command",),
    "read": ("path",),
    "write": ("path", "contents"),
    "str_replace": ("path", "old_string", "new_string"),
    "delete": ("path",),
    "ls": ("path",),
    "grep": ("pattern",),
    "glob": ("glob_pattern",),
}


def _to_value(value: Any) -> struct_pb2.Value:
    v = struct_pb2.Value()
    json_format.ParseDict(value, v)
    return v


# -- the state machine -------------------------------------------------------------------------


class ToolExecution:
    """One tool call run on the client. `start` once, then `feed` every exec reply addressed to
    one of `exec_ids` until it returns `Finished`."""

    def __init__(
        self,
        tool_call: ToolCall,
        *,
        call_id: str,
        model_call_id: str,
        mcp: McpIndex,
        conversation_id: str,
        shell_timeout_ms: int = DEFAULT_SHELL_TIMEOUT_MS,
    ) -> None:
        self.tool_call = tool_call
        self.call_id = call_id
        self.model_call_id = model_call_id
        self.conversation_id = conversation_id
        self.shell_timeout_ms = shell_timeout_ms
        self.tool_call_id = sanitize_tool_call_id(tool_call.id)
        self.args: dict[str, Any] = dict(tool_call.arguments)
        native = _NATIVE_KIND.get(tool_call.name)
        self.mcp_tool: McpTool | None = None
        if native is not None:
            self.kind = native
        else:
            self.kind = "mcp"
            self.mcp_tool = mcp.get(tool_call.name)
        self.exec_ids: set[int] = set()
        self.started_at_ms: int | None = None
        # Set by `start` when the arguments cannot be sent at all (missing required ones).
        self.finished_early: Finished | None = None
        self._early: Finished | None = None
        self._alloc: Callable[[], int] | None = None
        self._phase = "new"  # new → running (→ writing for StrReplace) → done
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._exit: agent_pb2.ShellStreamExit | None = None
        self._before: str | None = None  # StrReplace: the file as read
        self._after: str | None = None  # StrReplace: the file to write
        self._replaced = 0
        self._glob_retried = False

    # -- public API ------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._phase == "done"

    def start(
        self, alloc_exec_id: Callable[[], int], now_ms: int
    ) -> list[agent_pb2.AgentServerMessage]:
        """tool_call_started, then the first exec request. If the arguments are unusable the
        call ends at once: only tool_call_started is returned, and `finished_early` holds the
        error result and the completed card for the runner to deliver without any exec."""
        if self._phase != "new":
            raise RuntimeError("ToolExecution.start called twice")
        self._alloc = alloc_exec_id
        self.started_at_ms = now_ms
        self._phase = "running"
        started = self._update("tool_call_started", self._typed())
        problem = self._argument_problem()
        if problem is not None:
            # The call cannot run: nothing goes to the client, the answer is known now.
            tc = self._typed()
            self._set_error_result(tc, problem)
            self._early = Finished(
                result=self._result((TextContent(text=problem),), True),
                completed=self._completed(tc, now_ms),
            )
            self.finished_early = self._early
            self._phase = "done"
            return [started]
        first = self._first_exec()
        return [started, first]

    def feed(
        self,
        message: agent_pb2.ExecClientMessage | agent_pb2.ExecClientControlMessage,
        now_ms: int,
    ) -> Step:
        if self._phase == "done":
            return Send()
        if self._early is not None:
            if isinstance(message, agent_pb2.ExecClientControlMessage):
                if message.WhichOneof("message") == "heartbeat":
                    return Send()
            elif message.WhichOneof("message") is None:
                return Send()
            self._phase = "done"
            self.exec_ids.clear()
            return self._early
        if isinstance(message, agent_pb2.ExecClientControlMessage):
            return self._feed_control(message, now_ms)
        exec_id = message.id
        if self.exec_ids and exec_id not in self.exec_ids:
            return Send()  # a late reply of an exec already answered
        kind = message.WhichOneof("message")
        if kind is None:
            return Send()  # an empty ExecClientMessage is not a completion
        if kind == "shell_stream":
            return self._shell_stream(message.shell_stream, now_ms)
        if kind == "shell_result":
            return self._shell_result(message.shell_result, now_ms)
        if kind == "read_result" and self.kind in ("read", "str_replace"):
            if self.kind == "read":
                return self._read_result(message.read_result, now_ms)
            return self._edit_read(message.read_result, now_ms)
        if kind == "write_result" and self.kind in ("write", "str_replace"):
            return self._write_result(message.write_result, now_ms)
        if kind == "delete_result" and self.kind == "delete":
            return self._delete_result(message.delete_result, now_ms)
        if kind == "ls_result" and self.kind == "ls":
            return self._ls_result(message.ls_result, now_ms)
        if kind == "grep_result" and self.kind in ("grep", "glob"):
            return self._grep_result(message.grep_result, now_ms)
        if kind == "mcp_result" and self.kind == "mcp":
            return self._mcp_result(message.mcp_result, now_ms)
        return self._finish_error(
            f"Error: the client answered the {self.tool_call.name} call with an unexpected "
            f"{kind} reply.",
            now_ms,
        )

    def timeout_result(self, now_ms: int) -> Finished:
        waited = (now_ms - self.started_at_ms) / 1000 if self.started_at_ms is not None else None
        within = f" within {waited:g} s" if waited is not None else ""
        return self._finish_error(
            f"Error: the client did not answer the {self.tool_call.name} call{within}; it was "
            "aborted. Its effects, if any, are unknown.",
            now_ms,
        )

    def unknown_outcome_result(self, now_ms: int) -> Finished:
        return self._finish_error(
            f"Error: this {self.tool_call.name} call was sent to the client, but its answer "
            "was lost (the server restarted or the connection dropped). Its outcome is unknown "
            "and it was not run again. Check the current state before retrying it.",
            now_ms,
        )

    def abort_messages(self) -> list[agent_pb2.AgentServerMessage]:
        out = [
            agent_pb2.AgentServerMessage(
                exec_server_control_message=agent_pb2.ExecServerControlMessage(
                    abort=agent_pb2.ExecServerAbort(id=exec_id)
                )
            )
            for exec_id in sorted(self.exec_ids)
        ]
        self.exec_ids.clear()
        return out

    def local_completion(
        self, result: ToolResultMessage, now_ms: int
    ) -> agent_pb2.AgentServerMessage:
        """tool_call_completed for a call the loop answered itself (invalid arguments, unknown
        tool, canceled): the typed ToolCall with its args and an error result."""
        if self.started_at_ms is None:
            self.started_at_ms = now_ms
        tc = self._typed()
        self._set_error_result(tc, result.text or "the call was not run")
        return self._completed(tc, now_ms)

    # -- messages --------------------------------------------------------------------------

    def _update(self, which: str, tc: agent_pb2.ToolCall) -> agent_pb2.AgentServerMessage:
        iu = agent_pb2.InteractionUpdate()
        if which == "tool_call_started":
            iu.tool_call_started.call_id = self.call_id
            iu.tool_call_started.tool_call.CopyFrom(tc)
            iu.tool_call_started.model_call_id = self.model_call_id
        else:
            iu.tool_call_completed.call_id = self.call_id
            iu.tool_call_completed.tool_call.CopyFrom(tc)
            iu.tool_call_completed.model_call_id = self.model_call_id
        return agent_pb2.AgentServerMessage(interaction_update=iu)

    def _completed(self, tc: agent_pb2.ToolCall, now_ms: int) -> agent_pb2.AgentServerMessage:
        start = self.started_at_ms if self.started_at_ms is not None else now_ms
        tc.started_at_ms = max(start, 0)
        tc.completed_at_ms = max(now_ms, start, 0)
        return self._update("tool_call_completed", tc)

    def _exec(self, **oneof: Any) -> agent_pb2.AgentServerMessage:
        assert self._alloc is not None
        exec_id = self._alloc()
        self.exec_ids.add(exec_id)
        esm = agent_pb2.ExecServerMessage(id=exec_id, exec_id=self.tool_call_id, **oneof)
        return agent_pb2.AgentServerMessage(exec_server_message=esm)

    # -- arguments -------------------------------------------------------------------------

    def _argument_problem(self) -> str | None:
        missing = [k for k in _REQUIRED.get(self.kind, ()) if _str(self.args, k) is None]
        if missing:
            names = ", ".join(missing)
            return (
                f"Error: the {self.tool_call.name} call is missing the required string "
                f"argument(s) {names}. Call it again with all required arguments."
            )
        if self.kind == "str_replace":
            old = _str(self.args, "old_string") or ""
            if old == "":
                return (
                    "Error: old_string must not be empty. To create a file or replace its "
                    "whole content, use Write."
                )
            if old == _str(self.args, "new_string"):
                return "Error: old_string and new_string are identical; nothing would change."
        return None

    def _shell_args(self) -> agent_pb2.ShellArgs:
        # ShellArgs.timeout is milliseconds in Cursor's protocol (what the IDE expects). The
        # oh-my-pi client reads it as seconds, which only makes its limit longer; the runner's
        # tool deadline still bounds the call. See docs/dialect.md.
        timeout = _int(self.args, "timeout_ms")
        if timeout is None or timeout <= 0:
            timeout = self.shell_timeout_ms
        timeout = min(timeout, _INT32_MAX)
        return agent_pb2.ShellArgs(
            command=_str(self.args, "command") or "",
            working_directory=_str(self.args, "working_directory") or "",
            timeout=timeout,
            tool_call_id=self.tool_call_id,
            timeout_behavior=agent_pb2.TIMEOUT_BEHAVIOR_CANCEL,
            hard_timeout=timeout,
            close_stdin=True,
            conversation_id=self.conversation_id,
        )

    def _read_args(self, whole: bool = False) -> agent_pb2.ReadArgs:
        ra = agent_pb2.ReadArgs(path=_str(self.args, "path") or "", tool_call_id=self.tool_call_id)
        if not whole:
            offset = _int(self.args, "offset")
            limit = _int(self.args, "limit")
            if offset is not None and offset > 0:
                ra.offset = min(offset, _INT32_MAX)
            if limit is not None and limit > 0:
                ra.limit = min(limit, _INT32_MAX)
        return ra

    def _grep_args(self) -> agent_pb2.GrepArgs:
        if self.kind == "glob":
            ga = agent_pb2.GrepArgs(
                pattern="",
                glob=_str(self.args, "glob_pattern") or "",
                output_mode="files_with_matches",
                tool_call_id=self.tool_call_id,
            )
            target = _str(self.args, "target_directory")
            if target:
                ga.path = target
            return ga
        ga = agent_pb2.GrepArgs(
            pattern=_str(self.args, "pattern") or "", tool_call_id=self.tool_call_id
        )
        for key in ("path", "glob", "output_mode"):
            value = _str(self.args, key)
            if value:
                setattr(ga, key, value)
        ci = _bool(self.args, "case_insensitive")
        if ci is not None:
            ga.case_insensitive = ci
        return ga

    def _mcp_args(self) -> agent_pb2.McpArgs:
        tool = self.mcp_tool
        ma = agent_pb2.McpArgs(
            name=tool.definition_name if tool else self.tool_call.name,
            tool_name=tool.tool_name if tool else self.tool_call.name,
            provider_identifier=tool.provider_identifier if tool else "",
            tool_call_id=self.tool_call_id,
        )
        for key in sorted(self.args):
            ma.args[key].CopyFrom(_to_value(self.args[key]))
        return ma

    def _first_exec(self) -> agent_pb2.AgentServerMessage:
        match self.kind:
            case "shell":
                return self._exec(shell_stream_args=self._shell_args())
            case "read":
                return self._exec(read_args=self._read_args())
            case "str_replace":
                return self._exec(read_args=self._read_args(whole=True))
            case "write":
                return self._exec(
                    write_args=agent_pb2.WriteArgs(
                        path=_str(self.args, "path") or "",
                        file_text=_str(self.args, "contents") or "",
                        tool_call_id=self.tool_call_id,
                    )
                )
            case "delete":
                return self._exec(
                    delete_args=agent_pb2.DeleteArgs(
                        path=_str(self.args, "path") or "", tool_call_id=self.tool_call_id
                    )
                )
            case "ls":
                return self._exec(
                    ls_args=agent_pb2.LsArgs(
                        path=_str(self.args, "path") or "", tool_call_id=self.tool_call_id
                    )
                )
            case "grep" | "glob":
                return self._exec(grep_args=self._grep_args())
            case _:
                return self._exec(mcp_args=self._mcp_args())

    # -- typed ToolCall ----------------------------------------------------------------------

    def _typed(self) -> agent_pb2.ToolCall:
        tc = agent_pb2.ToolCall(tool_call_id=self.tool_call_id)
        path = _str(self.args, "path") or ""
        match self.kind:
            case "shell":
                tc.shell_tool_call.args.CopyFrom(self._shell_args())
            case "read":
                ta = tc.read_tool_call.args
                ta.path = path
                offset, limit = _int(self.args, "offset"), _int(self.args, "limit")
                if offset is not None and offset > 0:
                    ta.offset = min(offset, _INT32_MAX)
                if limit is not None and limit > 0:
                    ta.limit = min(limit, _INT32_MAX)
                ta.include_line_numbers = True
            case "write":
                tc.edit_tool_call.args.path = path
                tc.edit_tool_call.args.stream_content = _str(self.args, "contents") or ""
            case "str_replace":
                tc.edit_tool_call.args.path = path
            case "delete":
                tc.delete_tool_call.args.path = path
                tc.delete_tool_call.args.tool_call_id = self.tool_call_id
            case "ls":
                tc.ls_tool_call.args.path = path
                tc.ls_tool_call.args.tool_call_id = self.tool_call_id
            case "grep":
                tc.grep_tool_call.args.CopyFrom(self._grep_args())
            case "glob":
                ga = tc.glob_tool_call.args
                ga.glob_pattern = _str(self.args, "glob_pattern") or ""
                target = _str(self.args, "target_directory")
                if target:
                    ga.target_directory = target
            case _:
                try:
                    tc.mcp_tool_call.args.CopyFrom(self._mcp_args())
                except (json_format.ParseError, TypeError, ValueError):
                    tc.mcp_tool_call.args.name = self.tool_call.name
                    tc.mcp_tool_call.args.tool_name = self.tool_call.name
        return tc

    def _set_error_result(self, tc: agent_pb2.ToolCall, text: str) -> None:
        path = _str(self.args, "path") or ""
        match self.kind:
            case "shell":
                tc.shell_tool_call.result.failure.CopyFrom(
                    agent_pb2.ShellFailure(
                        command=_str(self.args, "command") or "",
                        working_directory=_str(self.args, "working_directory") or "",
                        exit_code=1,
                        stderr=text,
                    )
                )
            case "read":
                tc.read_tool_call.result.error.error_message = text
            case "write" | "str_replace":
                tc.edit_tool_call.result.error.CopyFrom(
                    agent_pb2.EditError(path=path, error=text, model_visible_error=text)
                )
            case "delete":
                tc.delete_tool_call.result.error.CopyFrom(
                    agent_pb2.DeleteError(path=path, error=text)
                )
            case "ls":
                tc.ls_tool_call.result.error.CopyFrom(agent_pb2.LsError(path=path, error=text))
            case "grep":
                tc.grep_tool_call.result.error.error = text
            case "glob":
                tc.glob_tool_call.result.error.error = text
            case _:
                tc.mcp_tool_call.result.error.error = text

    # -- finishing -------------------------------------------------------------------------

    def _result(self, content: tuple[UserContent, ...], is_error: bool) -> ToolResultMessage:
        return ToolResultMessage(
            tool_call_id=self.tool_call.id,
            tool_name=self.tool_call.name,
            content=content,
            is_error=is_error,
        )

    def _finish(
        self,
        text: str,
        tc: agent_pb2.ToolCall,
        now_ms: int,
        *,
        is_error: bool = False,
        images: tuple[ImageContent, ...] = (),
    ) -> Finished:
        self._phase = "done"
        self.exec_ids.clear()
        content: tuple[UserContent, ...] = (TextContent(text=text), *images)
        return Finished(
            result=self._result(content, is_error), completed=self._completed(tc, now_ms)
        )

    def _finish_error(self, text: str, now_ms: int) -> Finished:
        tc = self._typed()
        self._set_error_result(tc, text)
        return self._finish(text, tc, now_ms, is_error=True)

    def _feed_control(self, message: agent_pb2.ExecClientControlMessage, now_ms: int) -> Step:
        kind = message.WhichOneof("message")
        if kind == "heartbeat" or kind is None:
            return Send()
        if kind == "throw":
            if self.exec_ids and message.throw.id not in self.exec_ids:
                return Send()
            error = message.throw.error or "unknown error"
            code = f" ({message.throw.error_code})" if message.throw.HasField("error_code") else ""
            return self._finish_error(
                f"Error: the client could not run the {self.tool_call.name} call{code}: {error}",
                now_ms,
            )
        # stream_close
        if self.exec_ids and message.stream_close.id not in self.exec_ids:
            return Send()
        if self.kind == "shell" and self._exit is not None:
            return self._shell_done(
                None, self._exit.code, "".join(self._stdout), "".join(self._stderr), now_ms
            )
        return self._finish_error(
            f"Error: the client closed the {self.tool_call.name} exec stream before sending a "
            "result; the call failed.",
            now_ms,
        )

    # -- shell -----------------------------------------------------------------------------

    def _shell_delta(self, which: str, data: str) -> agent_pb2.AgentServerMessage:
        iu = agent_pb2.InteractionUpdate()
        iu.tool_call_delta.call_id = self.call_id
        iu.tool_call_delta.model_call_id = self.model_call_id
        delta = iu.tool_call_delta.tool_call_delta.shell_tool_call_delta
        if which == "stdout":
            delta.stdout.content = data
        else:
            delta.stderr.content = data
        return agent_pb2.AgentServerMessage(interaction_update=iu)

    def _shell_stream(self, stream: agent_pb2.ShellStream, now_ms: int) -> Step:
        event = stream.WhichOneof("event")
        if event == "stdout":
            self._stdout.append(stream.stdout.data)
            return Send([self._shell_delta("stdout", stream.stdout.data)])
        if event == "stderr":
            self._stderr.append(stream.stderr.data)
            return Send([self._shell_delta("stderr", stream.stderr.data)])
        if event == "exit":
            self._exit = stream.exit
            return Send()
        if event == "rejected":
            reason = stream.rejected.reason or "no reason given"
            return self._finish_error(f"The user rejected this command: {reason}", now_ms)
        if event == "permission_denied":
            error = stream.permission_denied.error or "permission denied"
            return self._finish_error(f"Error: permission denied: {error}", now_ms)
        if event == "backgrounded":
            bg = stream.backgrounded
            return self._shell_done(
                None,
                None,
                "".join(self._stdout),
                "".join(self._stderr),
                now_ms,
                note=f"The command was moved to the background (shell {bg.shell_id}); "
                "its further output is not available here.",
            )
        return Send()  # start, hook_context, unknown

    def _shell_result(self, result: agent_pb2.ShellResult, now_ms: int) -> Step:
        kind = result.WhichOneof("result")
        streamed_out, streamed_err = "".join(self._stdout), "".join(self._stderr)
        tc = self._typed()
        tc.shell_tool_call.result.CopyFrom(result)
        if kind == "success":
            s = result.success
            return self._shell_done(tc, s.exit_code, *self._output(s.stdout, s.stderr), now_ms)
        if kind == "failure":
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
            return self._shell_done(
                tc,
                f.exit_code,
                *self._output(f.stdout, f.stderr),
                now_ms,
                note=note,
                error=True,
            )
        if kind == "timeout":
            note = f"The command timed out after {result.timeout.timeout_ms} ms and was stopped."
            return self._shell_done(
                tc, None, streamed_out, streamed_err, now_ms, note=note, error=True
            )
        if kind == "rejected":
            text = f"The user rejected this command: {result.rejected.reason or 'no reason given'}"
            return self._finish(text, tc, now_ms, is_error=True)
        if kind == "spawn_error":
            text = f"Error: the command could not be started: {result.spawn_error.error}"
            return self._finish(text, tc, now_ms, is_error=True)
        if kind == "permission_denied":
            text = f"Error: permission denied: {result.permission_denied.error or 'no details'}"
            return self._finish(text, tc, now_ms, is_error=True)
        return self._finish_error("Error: the client sent an empty shell result.", now_ms)

    def _output(self, stdout: str, stderr: str) -> tuple[str, str]:
        """The result's own output when it has any, else what was streamed (never both: clients
        repeat the streamed text in the result)."""
        if stdout or stderr:
            return stdout, stderr
        return "".join(self._stdout), "".join(self._stderr)

    def _shell_done(
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
        if tc is None:  # finished from the stream alone: build the typed result ourselves
            tc = self._typed()
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

    # -- read ------------------------------------------------------------------------------

    @staticmethod
    def _read_failure(result: agent_pb2.ReadResult, path: str) -> str | None:
        kind = result.WhichOneof("result")
        if kind == "success":
            return None
        if kind == "file_not_found":
            return f"Error: file not found: {result.file_not_found.path or path}"
        if kind == "permission_denied":
            return f"Error: permission denied reading {result.permission_denied.path or path}"
        if kind == "rejected":
            return f"The user rejected reading {path}: {result.rejected.reason or 'no reason'}"
        if kind == "invalid_file":
            return (
                f"Error: {path} cannot be read as text: {result.invalid_file.reason or 'invalid'}"
            )
        if kind == "error":
            return f"Error reading {path}: {result.error.error or 'unknown error'}"
        return f"Error: the client sent an empty read result for {path}."

    @staticmethod
    def _content_of(success: agent_pb2.ReadSuccess) -> str | None:
        if success.WhichOneof("output") == "data":
            try:
                return success.data.decode("utf-8")
            except UnicodeDecodeError:
                return None
        return success.content

    def _read_result(self, result: agent_pb2.ReadResult, now_ms: int) -> Finished:
        path = _str(self.args, "path") or ""
        failure = self._read_failure(result, path)
        if failure is not None:
            return self._finish_error(failure, now_ms)
        s = result.success
        content = self._content_of(s)
        tc = self._typed()
        ok = tc.read_tool_call.result.success
        ok.path = s.path or path
        ok.total_lines = max(s.total_lines, 0)
        ok.file_size = max(min(s.file_size, 2**32 - 1), 0)
        if content is None:
            ok.is_empty = False
            text = f"{path} is a binary file ({len(s.data)} bytes); its content is not shown."
            ok.content = ""
            return self._finish(text, tc, now_ms)
        offset = _int(self.args, "offset")
        limit = _int(self.args, "limit")
        first = 1
        if (offset or limit) and not s.range_applied:
            # The client read the whole file: apply the requested window here.
            lines = content.split("\n")
            start = max((offset or 1) - 1, 0)
            end = start + limit if limit and limit > 0 else len(lines)
            content = "\n".join(lines[start:end])
            first = start + 1
        elif offset and s.range_applied:
            first = offset
        ok.content = content
        ok.is_empty = content == ""
        if s.truncated:
            ok.exceeded_limit = True
        # The line count is only worth a note when a window was asked for (clients count a
        # trailing newline differently, so a whole-file read gets no "of N" note).
        windowed = bool(offset or limit)
        total = s.total_lines if s.total_lines > 0 and windowed else None
        text = format_read(content, first_line=first, total_lines=total)
        if s.truncated:
            text += "\n[The client truncated this file; read the rest with offset and limit.]"
        return self._finish(text, tc, now_ms)

    # -- StrReplace --------------------------------------------------------------------------

    def _edit_read(self, result: agent_pb2.ReadResult, now_ms: int) -> Step:
        path = _str(self.args, "path") or ""
        failure = self._read_failure(result, path)
        if failure is not None:
            return self._edit_error(failure, now_ms, not_found=result.HasField("file_not_found"))
        content = self._content_of(result.success)
        if content is None:
            return self._edit_error(f"Error: {path} is a binary file; it cannot be edited.", now_ms)
        if result.success.truncated:
            return self._edit_error(
                f"Error: the client returned only part of {path}; it was not edited.", now_ms
            )
        old = _str(self.args, "old_string") or ""
        new = _str(self.args, "new_string") or ""
        count = content.count(old)
        if count == 0:
            return self._edit_error(
                f"Error: old_string was not found in {path}. Read the file again and quote the "
                "text exactly, including whitespace and indentation. The file was not changed.",
                now_ms,
            )
        replace_all = _bool(self.args, "replace_all") is True
        if count > 1 and not replace_all:
            return self._edit_error(
                f"Error: old_string occurs {count} times in {path}. Include more surrounding "
                "text to make it unique, or set replace_all to true. The file was not changed.",
                now_ms,
            )
        self._before = content
        self._after = content.replace(old, new) if replace_all else content.replace(old, new, 1)
        self._replaced = count if replace_all else 1
        self.exec_ids.clear()
        self._phase = "writing"
        write = self._exec(
            write_args=agent_pb2.WriteArgs(
                path=path, file_text=self._after, tool_call_id=self.tool_call_id
            )
        )
        return Send([write])

    def _edit_error(self, text: str, now_ms: int, *, not_found: bool = False) -> Finished:
        tc = self._typed()
        path = _str(self.args, "path") or ""
        if not_found:
            tc.edit_tool_call.result.file_not_found.path = path
        else:
            tc.edit_tool_call.result.error.CopyFrom(
                agent_pb2.EditError(path=path, error=text, model_visible_error=text)
            )
        return self._finish(text, tc, now_ms, is_error=True)

    # -- write (Write and StrReplace's second step) -----------------------------------------

    @staticmethod
    def _write_failure(result: agent_pb2.WriteResult, path: str) -> str | None:
        kind = result.WhichOneof("result")
        if kind == "success":
            return None
        if kind == "permission_denied":
            pd = result.permission_denied
            return f"Error: permission denied writing {path}: {pd.error or 'no details'}"
        if kind == "no_space":
            return f"Error: no space left on the device to write {path}."
        if kind == "rejected":
            return f"The user rejected writing {path}: {result.rejected.reason or 'no reason'}"
        if kind == "error":
            return f"Error writing {path}: {result.error.error or 'unknown error'}"
        return f"Error: the client sent an empty write result for {path}."

    def _write_result(self, result: agent_pb2.WriteResult, now_ms: int) -> Finished:
        path = _str(self.args, "path") or ""
        failure = self._write_failure(result, path)
        if failure is not None:
            tc = self._typed()
            edit = tc.edit_tool_call.result
            if result.WhichOneof("result") == "rejected":
                edit.rejected.CopyFrom(
                    agent_pb2.EditRejected(path=path, reason=result.rejected.reason)
                )
            elif result.WhichOneof("result") == "permission_denied":
                edit.write_permission_denied.CopyFrom(
                    agent_pb2.EditWritePermissionDenied(
                        path=path, error=result.permission_denied.error
                    )
                )
            else:
                edit.error.CopyFrom(
                    agent_pb2.EditError(path=path, error=failure, model_visible_error=failure)
                )
            if self.kind == "str_replace":
                failure += " The edit was not applied."
            return self._finish(failure, tc, now_ms, is_error=True)
        tc = self._typed()
        ok = tc.edit_tool_call.result.success
        ok.path = result.success.path or path
        if self.kind == "write":
            contents = _str(self.args, "contents") or ""
            ok.after_full_file_content = contents
            lines = contents.count("\n") + (0 if contents.endswith("\n") or not contents else 1)
            ok.lines_added = lines
            text = f"Wrote {path} ({lines} lines)."
        else:
            assert self._before is not None and self._after is not None
            old = _str(self.args, "old_string") or ""
            new = _str(self.args, "new_string") or ""
            ok.before_full_file_content = self._before
            ok.after_full_file_content = self._after
            ok.lines_removed = (old.count("\n") + 1) * self._replaced
            ok.lines_added = (new.count("\n") + 1) * self._replaced if new else 0
            n = self._replaced
            text = f"Edited {path}: replaced {n} occurrence{'s' if n != 1 else ''}."
        return self._finish(text, tc, now_ms)

    # -- delete, ls, grep/glob, mcp ------------------------------------------------------------

    def _delete_result(self, result: agent_pb2.DeleteResult, now_ms: int) -> Finished:
        path = _str(self.args, "path") or ""
        tc = self._typed()
        tc.delete_tool_call.result.CopyFrom(result)
        kind = result.WhichOneof("result")
        texts = {
            "success": f"Deleted {path}.",
            "file_not_found": f"Error: file not found: {path}",
            "not_file": f"Error: {path} is not a file ({result.not_file.actual_type or 'other'}); "
            "only files can be deleted.",
            "permission_denied": f"Error: permission denied deleting {path}"
            + (
                f": {result.permission_denied.client_visible_error}"
                if result.permission_denied.client_visible_error
                else ""
            ),
            "file_busy": f"Error: {path} is busy (in use) and was not deleted.",
            "rejected": f"The user rejected deleting {path}: "
            + (result.rejected.reason or "no reason"),
            "error": f"Error deleting {path}: {result.error.error or 'unknown error'}",
        }
        if kind is None:
            return self._finish_error(
                f"Error: the client sent an empty delete result for {path}.", now_ms
            )
        return self._finish(texts[kind], tc, now_ms, is_error=kind != "success")

    def _ls_result(self, result: agent_pb2.LsResult, now_ms: int) -> Finished:
        path = _str(self.args, "path") or ""
        tc = self._typed()
        tc.ls_tool_call.result.CopyFrom(result)
        kind = result.WhichOneof("result")
        if kind == "success":
            return self._finish(format_ls(result.success.directory_tree_root), tc, now_ms)
        if kind == "timeout":
            text = format_ls(result.timeout.directory_tree_root)
            return self._finish(text + "\n[Listing timed out; it may be incomplete.]", tc, now_ms)
        if kind == "error":
            return self._finish(
                f"Error listing {path}: {result.error.error}", tc, now_ms, is_error=True
            )
        if kind == "rejected":
            text = f"The user rejected listing {path}: {result.rejected.reason or 'no reason'}"
            return self._finish(text, tc, now_ms, is_error=True)
        return self._finish_error(f"Error: the client sent an empty ls result for {path}.", now_ms)

    def _grep_result(self, result: agent_pb2.GrepResult, now_ms: int) -> Step:
        kind = result.WhichOneof("result")
        if (
            kind == "error"
            and self.kind == "glob"
            and not self._glob_retried
            and "pattern" in result.error.error.lower()
        ):
            # Cursor's own client lists the glob's files for an empty pattern; some clients
            # (oh-my-pi) refuse an empty pattern. Ask once more with "." (files that have at
            # least one character; empty files are then not listed).
            self._glob_retried = True
            self.exec_ids.clear()
            args = self._grep_args()
            args.pattern = "."
            return Send([self._exec(grep_args=args)])
        tc = self._typed()
        if kind == "error":
            text = f"Error: search failed: {result.error.error or 'unknown error'}"
            if self.kind == "glob":
                tc.glob_tool_call.result.error.error = text
            else:
                tc.grep_tool_call.result.CopyFrom(result)
            return self._finish(text, tc, now_ms, is_error=True)
        if kind != "success":
            return self._finish_error("Error: the client sent an empty search result.", now_ms)
        s = result.success
        if self.kind == "glob":
            files = _grep_files(s)
            ok = tc.glob_tool_call.result.success
            ok.pattern = _str(self.args, "glob_pattern") or ""
            ok.path = s.path or (_str(self.args, "target_directory") or "")
            ok.files.extend(files)
            ok.total_files = len(files)
            text = clip_middle("\n".join(files)) if files else "No files matched."
            return self._finish(text, tc, now_ms)
        tc.grep_tool_call.result.CopyFrom(result)
        return self._finish(format_grep(s), tc, now_ms)

    def _mcp_result(self, result: agent_pb2.McpResult, now_ms: int) -> Step:
        kind = result.WhichOneof("result")
        if kind == "approved":
            return Send()  # an approval notice; the result follows
        tc = self._typed()
        name = self.tool_call.name
        if kind == "success":
            tc.mcp_tool_call.result.success.CopyFrom(result.success)
            texts: list[str] = []
            images: list[ImageContent] = []
            for item in result.success.content:
                which = item.WhichOneof("content")
                if which == "text":
                    texts.append(item.text.text)
                elif which == "image":
                    images.append(
                        ImageContent(
                            data=base64.b64encode(item.image.data).decode("ascii"),
                            mime_type=item.image.mime_type or "image/png",
                        )
                    )
            text = clip_middle("\n".join(texts)) if texts else "(no text content)"
            return self._finish(
                text, tc, now_ms, is_error=result.success.is_error, images=tuple(images)
            )
        if kind == "error":
            text = f"Error from MCP tool {name}: {result.error.error or 'unknown error'}"
        elif kind == "rejected":
            text = f"The user rejected this call of {name}: {result.rejected.reason or 'no reason'}"
            tc.mcp_tool_call.result.rejected.CopyFrom(result.rejected)
            return self._finish(text, tc, now_ms, is_error=True)
        elif kind == "permission_denied":
            text = f"Error: permission denied for {name}: {result.permission_denied.error}"
            tc.mcp_tool_call.result.permission_denied.CopyFrom(result.permission_denied)
            return self._finish(text, tc, now_ms, is_error=True)
        elif kind == "tool_not_found":
            available = ", ".join(result.tool_not_found.available_tools) or "none"
            text = (
                f"Error: the client has no MCP tool {result.tool_not_found.name or name!r} "
                f"(available: {available})."
            )
        elif kind == "server_not_found":
            servers = ", ".join(result.server_not_found.available_servers) or "none"
            text = (
                f"Error: the MCP server {result.server_not_found.name!r} of {name} is not "
                f"available on the client (available: {servers})."
            )
        else:
            text = f"Error: the client sent an empty result for MCP tool {name}."
        tc.mcp_tool_call.result.error.error = text
        return self._finish(text, tc, now_ms, is_error=True)
