"""The file tools: Read, Write, StrReplace, Delete and LS, one exec each except StrReplace.

StrReplace has no exec of its own: it reads the whole file, edits it here and writes it back,
so the model's text must match the file exactly and the IDE gets a before/after diff.
"""

from __future__ import annotations

from typing import ClassVar

from ....llm.types import ToolCall
from ..proto import agent_pb2
from .args import get_bool, get_int, positive_int32, str_or_empty
from .format import format_ls, format_read
from .images import image_read_result
from .machine import Finished, Handlers, Phase, Step, ToolMachine, ToolSettings

__all__ = [
    "DeleteMachine",
    "EditMachine",
    "LsMachine",
    "ReadMachine",
    "StrReplaceMachine",
    "WriteMachine",
    "read_failure",
    "read_text",
]


def read_failure(result: agent_pb2.ReadResult, path: str) -> str | None:
    """The error text of a read that did not succeed, or None."""
    match result.WhichOneof("result"):
        case "success":
            return None
        case "file_not_found":
            return f"Error: file not found: {result.file_not_found.path or path}"
        case "permission_denied":
            return f"Error: permission denied reading {result.permission_denied.path or path}"
        case "rejected":
            return f"The user rejected reading {path}: {result.rejected.reason or 'no reason'}"
        case "invalid_file":
            reason = result.invalid_file.reason or "invalid"
            return f"Error: {path} cannot be read as text: {reason}"
        case "error":
            return f"Error reading {path}: {result.error.error or 'unknown error'}"
        case _:
            return f"Error: the client sent an empty read result for {path}."


def read_text(success: agent_pb2.ReadSuccess) -> str | None:
    """The file as text, or None when the client sent bytes that are not UTF-8."""
    if success.WhichOneof("output") == "data":
        try:
            return success.data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return success.content


def write_failure(result: agent_pb2.WriteResult, path: str) -> str | None:
    """The error text of a write that did not succeed, or None."""
    match result.WhichOneof("result"):
        case "success":
            return None
        case "permission_denied":
            error = result.permission_denied.error or "no details"
            return f"Error: permission denied writing {path}: {error}"
        case "no_space":
            return f"Error: no space left on the device to write {path}."
        case "rejected":
            return f"The user rejected writing {path}: {result.rejected.reason or 'no reason'}"
        case "error":
            return f"Error writing {path}: {result.error.error or 'unknown error'}"
        case _:
            return f"Error: the client sent an empty write result for {path}."


class _PathMachine(ToolMachine):
    """A tool whose first argument is the path it works on."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)

    @property
    def path(self) -> str:
        return str_or_empty(self.args, "path")


# -- Read --------------------------------------------------------------------------------------


class ReadMachine(_PathMachine):
    CARD = "read_tool_call"

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        ta = tc.read_tool_call.args
        ta.path = self.path
        offset, limit = positive_int32(self.args, "offset"), positive_int32(self.args, "limit")
        if offset is not None:
            ta.offset = offset
        if limit is not None:
            ta.limit = limit
        ta.include_line_numbers = True
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.read_tool_call.result.error.error_message = text

    def _first_exec(self) -> bytes:
        ra = agent_pb2.ReadArgs(path=self.path, tool_call_id=self.tool_call_id)
        offset, limit = positive_int32(self.args, "offset"), positive_int32(self.args, "limit")
        if offset is not None:
            ra.offset = offset
        if limit is not None and not self._from_end:
            # A window counted from the end is cut here: the client reads the whole file.
            ra.limit = limit
        return self._exec("read_args", ra)

    @property
    def _from_end(self) -> bool:
        """A negative offset counts lines from the end of the file (-1: the last line)."""
        offset = get_int(self.args, "offset")
        return offset is not None and offset < 0

    def _on_read(self, result: agent_pb2.ReadResult, now_ms: int) -> Finished:
        path = self.path
        failure = read_failure(result, path)
        if failure is not None:
            return self._finish_error(failure, now_ms)
        s = result.success
        content = read_text(s)
        tc = self._card()
        ok = tc.read_tool_call.result.success
        ok.path = s.path or path
        ok.total_lines = max(s.total_lines, 0)
        ok.file_size = max(min(s.file_size, 2**32 - 1), 0)
        if s.WhichOneof("output") == "data":
            image = image_read_result(path, s.data, vision=self.settings.vision)
            if image is not None:
                text, images = image
                ok.is_empty = False
                if images:
                    ok.data = s.data  # the card shows what the model was shown
                return self._finish(text, tc, now_ms, images=images)
        if content is None:
            ok.is_empty = False
            ok.content = ""
            text = f"{path} is a binary file ({len(s.data)} bytes); its content is not shown."
            return self._finish(text, tc, now_ms)
        # The model's own numbers, not the clamped ones sent (the text numbers lines from them).
        offset, limit = get_int(self.args, "offset"), get_int(self.args, "limit")
        first = 1
        if offset is not None and offset < 0:
            # Counted from the end: the client sent the whole file (no window was asked of it).
            lines = content.split("\n")
            if lines and lines[-1] == "":
                lines.pop()  # a final newline ends the last line; it starts none
            start = max(len(lines) + offset, 0)
            end = start + limit if limit and limit > 0 else len(lines)
            content = "\n".join(lines[start:end])
            first = start + 1
        elif (offset or limit) and not s.range_applied:
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
            if offset is not None and offset < 0:
                text += (
                    "\n[The lines counted from the end are those of the truncated text, not of "
                    "the file: use a positive offset to read its end.]"
                )
        return self._finish(text, tc, now_ms)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"read_result": _on_read}}


# -- Write and StrReplace ----------------------------------------------------------------------


class EditMachine(_PathMachine):
    """Write and StrReplace: the edit card, and the write that ends both."""

    CARD = "edit_tool_call"
    FAILED_NOTE: ClassVar[str] = ""  # added to the model's text when the write fails

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.edit_tool_call.args.path = self.path
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.edit_tool_call.result.error.CopyFrom(
            agent_pb2.EditError(path=self.path, error=text, model_visible_error=text)
        )

    def _write(self, file_text: str) -> tuple[str, agent_pb2.WriteArgs]:
        """The write exec request: the oneof field and its args."""
        args = agent_pb2.WriteArgs(
            path=self.path, file_text=file_text, tool_call_id=self.tool_call_id
        )
        return "write_args", args

    def _written(self, ok: agent_pb2.EditSuccess) -> str:
        """Fill the card's success and say what was done."""
        raise NotImplementedError

    def _on_write(self, result: agent_pb2.WriteResult, now_ms: int) -> Finished:
        path = self.path
        failure = write_failure(result, path)
        tc = self._card()
        edit = tc.edit_tool_call.result
        if failure is None:
            edit.success.path = result.success.path or path
            return self._finish(self._written(edit.success), tc, now_ms)
        match result.WhichOneof("result"):
            case "rejected":
                edit.rejected.CopyFrom(
                    agent_pb2.EditRejected(path=path, reason=result.rejected.reason)
                )
            case "permission_denied":
                edit.write_permission_denied.CopyFrom(
                    agent_pb2.EditWritePermissionDenied(
                        path=path, error=result.permission_denied.error
                    )
                )
            case _:
                edit.error.CopyFrom(
                    agent_pb2.EditError(path=path, error=failure, model_visible_error=failure)
                )
        return self._finish(failure + self.FAILED_NOTE, tc, now_ms, is_error=True)


class WriteMachine(EditMachine):
    REQUIRED = ("path", "contents")

    @property
    def contents(self) -> str:
        return str_or_empty(self.args, "contents")

    def _card(self) -> agent_pb2.ToolCall:
        tc = super()._card()
        tc.edit_tool_call.args.stream_content = self.contents
        return tc

    def _first_exec(self) -> bytes:
        return self._exec(*self._write(self.contents))

    def _written(self, ok: agent_pb2.EditSuccess) -> str:
        contents = self.contents
        ok.after_full_file_content = contents
        lines = contents.count("\n") + (0 if contents.endswith("\n") or not contents else 1)
        ok.lines_added = lines
        return f"Wrote {self.path} ({lines} lines)."

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"write_result": EditMachine._on_write}}


class StrReplaceMachine(EditMachine):
    REQUIRED = ("path", "old_string", "new_string")
    FAILED_NOTE = " The edit was not applied."

    def __init__(
        self, tool_call: ToolCall, *, call_id: str, model_call_id: str, settings: ToolSettings
    ) -> None:
        super().__init__(tool_call, call_id=call_id, model_call_id=model_call_id, settings=settings)
        self._before = ""  # the file as read
        self._after = ""  # the file to write
        self._replaced = 0

    @property
    def old(self) -> str:
        return str_or_empty(self.args, "old_string")

    @property
    def new(self) -> str:
        return str_or_empty(self.args, "new_string")

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        if self.old == "":
            return (
                "Error: old_string must not be empty. To create a file or replace its whole "
                "content, use Write."
            )
        if self.old == self.new:
            return "Error: old_string and new_string are identical; nothing would change."
        return None

    def _first_exec(self) -> bytes:
        # The whole file: the edit is made here, on all of it.
        whole = agent_pb2.ReadArgs(path=self.path, tool_call_id=self.tool_call_id)
        return self._exec("read_args", whole)

    def _on_read(self, result: agent_pb2.ReadResult, now_ms: int) -> Step:
        path = self.path
        failure = read_failure(result, path)
        if failure is not None:
            return self._refuse(failure, now_ms, not_found=result.HasField("file_not_found"))
        content = read_text(result.success)
        if content is None:
            return self._refuse(f"Error: {path} is a binary file; it cannot be edited.", now_ms)
        if result.success.truncated:
            return self._refuse(
                f"Error: the client returned only part of {path}; it was not edited.", now_ms
            )
        old, new = self.old, self.new
        count = content.count(old)
        if count == 0:
            return self._refuse(
                f"Error: old_string was not found in {path}. Read the file again and quote the "
                "text exactly, including whitespace and indentation. The file was not changed.",
                now_ms,
            )
        replace_all = get_bool(self.args, "replace_all") is True
        if count > 1 and not replace_all:
            return self._refuse(
                f"Error: old_string occurs {count} times in {path}. Include more surrounding "
                "text to make it unique, or set replace_all to true. The file was not changed.",
                now_ms,
            )
        self._before = content
        self._after = content.replace(old, new) if replace_all else content.replace(old, new, 1)
        self._replaced = count if replace_all else 1
        return self._next_exec(Phase.WRITING, *self._write(self._after))

    def _refuse(self, text: str, now_ms: int, *, not_found: bool = False) -> Finished:
        """The edit cannot be made: no write is sent."""
        tc = self._card()
        if not_found:
            tc.edit_tool_call.result.file_not_found.path = self.path
        else:
            self._set_error(tc, text)
        return self._finish(text, tc, now_ms, is_error=True)

    def _written(self, ok: agent_pb2.EditSuccess) -> str:
        n = self._replaced
        ok.before_full_file_content = self._before
        ok.after_full_file_content = self._after
        ok.lines_removed = (self.old.count("\n") + 1) * n
        ok.lines_added = (self.new.count("\n") + 1) * n if self.new else 0
        return f"Edited {self.path}: replaced {n} occurrence{'s' if n != 1 else ''}."

    # The read is taken only before the write is out, the write only after: a reply of the
    # other kind is an unexpected one.
    HANDLERS: ClassVar[Handlers] = {
        Phase.RUNNING: {"read_result": _on_read},
        Phase.WRITING: {"write_result": EditMachine._on_write},
    }


# -- Delete and LS -----------------------------------------------------------------------------


class DeleteMachine(_PathMachine):
    CARD = "delete_tool_call"

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.delete_tool_call.args.path = self.path
        tc.delete_tool_call.args.tool_call_id = self.tool_call_id
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.delete_tool_call.result.error.CopyFrom(agent_pb2.DeleteError(path=self.path, error=text))

    def _first_exec(self) -> bytes:
        return self._exec(
            "delete_args", agent_pb2.DeleteArgs(path=self.path, tool_call_id=self.tool_call_id)
        )

    def _on_delete(self, result: agent_pb2.DeleteResult, now_ms: int) -> Finished:
        path = self.path
        match result.WhichOneof("result"):
            case "success":
                text = f"Deleted {path}."
            case "file_not_found":
                text = f"Error: file not found: {path}"
            case "not_file":
                kind = result.not_file.actual_type or "other"
                text = f"Error: {path} is not a file ({kind}); only files can be deleted."
            case "permission_denied":
                detail = result.permission_denied.client_visible_error
                text = f"Error: permission denied deleting {path}" + (
                    f": {detail}" if detail else ""
                )
            case "file_busy":
                text = f"Error: {path} is busy (in use) and was not deleted."
            case "rejected":
                text = f"The user rejected deleting {path}: {result.rejected.reason or 'no reason'}"
            case "error":
                text = f"Error deleting {path}: {result.error.error or 'unknown error'}"
            case _:
                return self._finish_error(
                    f"Error: the client sent an empty delete result for {path}.", now_ms
                )
        tc = self._card()
        tc.delete_tool_call.result.CopyFrom(result)
        return self._finish(text, tc, now_ms, is_error=not result.HasField("success"))

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"delete_result": _on_delete}}


class LsMachine(_PathMachine):
    CARD = "ls_tool_call"

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.ls_tool_call.args.path = self.path
        tc.ls_tool_call.args.tool_call_id = self.tool_call_id
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.ls_tool_call.result.error.CopyFrom(agent_pb2.LsError(path=self.path, error=text))

    def _first_exec(self) -> bytes:
        ls = agent_pb2.LsArgs(path=self.path, tool_call_id=self.tool_call_id)
        return self._exec("ls_args", ls)

    def _on_ls(self, result: agent_pb2.LsResult, now_ms: int) -> Finished:
        path = self.path
        tc = self._card()
        tc.ls_tool_call.result.CopyFrom(result)
        match result.WhichOneof("result"):
            case "success":
                return self._finish(format_ls(result.success.directory_tree_root), tc, now_ms)
            case "timeout":
                text = format_ls(result.timeout.directory_tree_root)
                text += "\n[Listing timed out; it may be incomplete.]"
                return self._finish(text, tc, now_ms)
            case "error":
                text = f"Error listing {path}: {result.error.error}"
                return self._finish(text, tc, now_ms, is_error=True)
            case "rejected":
                text = f"The user rejected listing {path}: {result.rejected.reason or 'no reason'}"
                return self._finish(text, tc, now_ms, is_error=True)
            case _:
                return self._finish_error(
                    f"Error: the client sent an empty ls result for {path}.", now_ms
                )

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"ls_result": _on_ls}}
