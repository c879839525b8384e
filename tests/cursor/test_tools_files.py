"""The file tools on the client: Read, Write, StrReplace (read, then write), Delete and LS."""

from __future__ import annotations

from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import (
    MAX_RESULT_CHARS,
    Phase,
    Step,
    ToolMachine,
    format_read,
)
from tests.cursor.tool_support import (
    T0,
    Ids,
    close,
    completed,
    esm,
    finished,
    ignored,
    reply,
    sent,
    start,
    started_card,
)

# -- Read --------------------------------------------------------------------------------------


def test_read_success_with_line_numbers() -> None:
    tool, out, _ = start("Read", {"path": "src/a.py"})
    args = started_card(out).read_tool_call.args
    assert args.path == "src/a.py" and args.include_line_numbers
    ra = esm(out).read_args
    assert (ra.path, ra.tool_call_id, ra.HasField("offset")) == ("src/a.py", "toolu_1", False)
    ok = a.ReadResult(success=a.ReadSuccess(path="/w/src/a.py", content="a\nb\n", total_lines=2))
    done = finished(tool.feed(reply(1, read_result=ok), T0 + 1))
    assert done.result.text == "     1\ta\n     2\tb"
    tc = completed(done)
    assert tc.read_tool_call.result.success.content == "a\nb\n"
    assert tc.read_tool_call.result.success.total_lines == 2
    assert tc.read_tool_call.result.success.path == "/w/src/a.py"
    assert tool.phase is Phase.DONE


def test_read_range_applied_here_when_client_ignores_it() -> None:
    tool, out, _ = start("Read", {"path": "f", "offset": 3, "limit": 2})
    assert (esm(out).read_args.offset, esm(out).read_args.limit) == (3, 2)
    content = "\n".join(f"l{i}" for i in range(1, 11))
    ok = a.ReadResult(success=a.ReadSuccess(content=content, total_lines=10))
    done = finished(tool.feed(reply(1, read_result=ok), T0))
    assert done.result.text.startswith("     3\tl3\n     4\tl4\n")
    assert "of 10" in done.result.text and "offset=5" in done.result.text
    assert completed(done).read_tool_call.result.success.content == "l3\nl4"


def test_read_range_applied_by_client() -> None:
    tool, _, _ = start("Read", {"path": "f", "offset": 3, "limit": 2})
    ok = a.ReadResult(success=a.ReadSuccess(content="l3\nl4", total_lines=10, range_applied=True))
    done = finished(tool.feed(reply(1, read_result=ok), T0))
    assert done.result.text.startswith("     3\tl3\n     4\tl4")


def test_whole_file_read_has_no_line_count_note() -> None:
    tool, _, _ = start("Read", {"path": "hello.txt"})
    ok = a.ReadResult(success=a.ReadSuccess(content="hello world\n", total_lines=2))
    done = finished(tool.feed(reply(1, read_result=ok), T0))
    assert done.result.text == "     1\thello world"


def test_read_binary_and_truncated_files() -> None:
    tool, _, _ = start("Read", {"path": "img.png"})
    binary = a.ReadResult(success=a.ReadSuccess(data=b"\x89PNG\xff"))
    done = finished(tool.feed(reply(1, read_result=binary), T0))
    assert done.result.text == "img.png is a binary file (5 bytes); its content is not shown."
    assert not done.result.is_error
    assert completed(done).read_tool_call.result.success.content == ""

    tool, _, _ = start("Read", {"path": "big.txt"})
    cut = a.ReadResult(success=a.ReadSuccess(data=b"x\n", truncated=True))
    done = finished(tool.feed(reply(1, read_result=cut), T0))
    assert done.result.text == (
        "     1\tx\n[The client truncated this file; read the rest with offset and limit.]"
    )
    assert completed(done).read_tool_call.result.success.exceeded_limit


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
    tool, _, _ = start("Read", {"path": "f"})
    done = finished(tool.feed(reply(1, read_result=result), T0))
    assert done.result.is_error and expect in done.result.text
    assert completed(done).read_tool_call.result.error.error_message == done.result.text


def test_format_read_cuts_at_line_boundary() -> None:
    text = format_read("x" * 100 + "\n" + ("y" * 1000 + "\n") * 100)
    assert len(text) < MAX_RESULT_CHARS + 300
    assert "Read on with offset=" in text
    assert format_read("") == "(the file is empty)"
    assert format_read("", first_line=5) == "(no lines in this range)"


def test_huge_numbers_are_clamped_not_crashing() -> None:
    _, out, _ = start("Read", {"path": "f", "offset": 10**12, "limit": 10**12})
    ra = esm(out).read_args
    assert ra.offset == ra.limit == 2**31 - 1
    assert started_card(out).read_tool_call.args.limit == 2**31 - 1


@pytest.mark.parametrize(
    ("offset", "limit", "first", "lines"),
    [(-3, None, 8, [8, 9, 10]), (-5, 2, 6, [6, 7]), (-1, None, 10, [10]), (-20, None, 1, None)],
)
def test_a_negative_offset_counts_from_the_end(
    offset: int, limit: int | None, first: int, lines: list[int] | None
) -> None:
    args: dict[str, Any] = {"path": "f", "offset": offset}
    if limit is not None:
        args["limit"] = limit
    tool, out, _ = start("Read", args)
    ra = esm(out).read_args
    assert not ra.HasField("offset") and not ra.HasField("limit")  # the whole file is read
    content = "".join(f"l{i}\n" for i in range(1, 11))  # ten lines, a final newline
    ok = a.ReadResult(success=a.ReadSuccess(content=content, total_lines=10))
    done = finished(tool.feed(reply(1, read_result=ok), T0))
    want = lines if lines is not None else list(range(1, 11))
    shown = [ln for ln in done.result.text.split("\n") if "\t" in ln]
    assert shown == [f"{n:>6}\tl{n}" for n in want]
    assert completed(done).read_tool_call.result.success.content == "\n".join(f"l{n}" for n in want)
    assert first == want[0]


def test_a_negative_offset_on_a_truncated_read_says_so() -> None:
    tool, _, _ = start("Read", {"path": "f", "offset": -1})
    cut = a.ReadResult(success=a.ReadSuccess(content="a\nb", truncated=True))
    done = finished(tool.feed(reply(1, read_result=cut), T0))
    assert done.result.text.startswith("     2\tb\n[The client truncated")
    assert "counted from the end are those of the truncated text" in done.result.text


@pytest.mark.parametrize("offset", ["--3", "²", "1_000", True, -4, 0, 2.5])
def test_unreadable_numbers_are_left_out_not_crashing(offset: Any) -> None:
    _, out, _ = start("Read", {"path": "f", "offset": offset})
    assert not esm(out).read_args.HasField("offset")
    assert not started_card(out).read_tool_call.args.HasField("offset")


# -- Write -------------------------------------------------------------------------------------


def test_write_success_and_failures() -> None:
    tool, out, _ = start("Write", {"path": "n.txt", "contents": "a\nb\n"})
    assert started_card(out).edit_tool_call.args.stream_content == "a\nb\n"
    wa = esm(out).write_args
    assert (wa.path, wa.file_text, wa.tool_call_id) == ("n.txt", "a\nb\n", "toolu_1")
    ok = a.WriteResult(success=a.WriteSuccess(path="/w/n.txt", lines_created=2))
    done = finished(tool.feed(reply(1, write_result=ok), T0))
    assert done.result.text == "Wrote n.txt (2 lines)." and not done.result.is_error
    success = completed(done).edit_tool_call.result.success
    assert success.after_full_file_content == "a\nb\n"
    assert (success.path, success.lines_added) == ("/w/n.txt", 2)

    for result, expect, variant in [
        (a.WriteResult(rejected=a.WriteRejected(reason="no")), "rejected writing", "rejected"),
        (a.WriteResult(no_space=a.WriteNoSpace()), "no space", "error"),
        (
            a.WriteResult(permission_denied=a.WritePermissionDenied(error="ro")),
            "ro",
            "write_permission_denied",
        ),
        (a.WriteResult(error=a.WriteError(error="EIO")), "EIO", "error"),
        (a.WriteResult(), "empty write result", "error"),
    ]:
        tool, _, _ = start("Write", {"path": "n.txt", "contents": "x"})
        done = finished(tool.feed(reply(1, write_result=result), T0))
        assert done.result.is_error and expect in done.result.text
        assert not done.result.text.endswith("The edit was not applied.")
        assert completed(done).edit_tool_call.result.WhichOneof("result") == variant


def test_write_counts_a_last_line_without_newline() -> None:
    tool, _, _ = start("Write", {"path": "n.txt", "contents": "a\nb"})
    done = finished(tool.feed(reply(1, write_result=a.WriteResult(success=a.WriteSuccess())), T0))
    assert done.result.text == "Wrote n.txt (2 lines)."


# -- StrReplace --------------------------------------------------------------------------------


def _str_replace(args: dict[str, Any], content: str) -> tuple[ToolMachine, Step, Ids]:
    tool, out, ids = start("StrReplace", args)
    ra = esm(out).read_args
    assert (ra.path, ra.tool_call_id) == (args["path"], "toolu_1")
    assert not ra.HasField("offset") and not ra.HasField("limit")
    assert tool.phase is Phase.RUNNING
    ok = a.ReadResult(success=a.ReadSuccess(content=content))
    return tool, tool.feed(reply(1, read_result=ok), T0 + 1), ids


def test_str_replace_reads_then_writes_edited_text() -> None:
    args = {"path": "m.py", "old_string": "x = 1", "new_string": "x = 2"}
    tool, step, _ = _str_replace(args, "a\nx = 1\nb\n")
    frames = sent(step)
    assert len(frames) == 1
    request = frames[0].exec_server_message
    assert request.id == 2 and request.write_args.file_text == "a\nx = 2\nb\n"
    assert request.write_args.tool_call_id == "toolu_1"
    assert tool.exec_ids == {2} and tool.phase is Phase.WRITING
    # The read's stream_close: exec 1 is no longer waited on.
    assert "exec 1" in ignored(tool.feed(close(1), T0 + 2))
    assert tool.phase is Phase.WRITING
    ok = a.WriteResult(success=a.WriteSuccess(path="m.py"))
    done = finished(tool.feed(reply(2, write_result=ok), T0 + 3))
    assert done.result.text == "Edited m.py: replaced 1 occurrence."
    success = completed(done).edit_tool_call.result.success
    assert success.before_full_file_content == "a\nx = 1\nb\n"
    assert success.after_full_file_content == "a\nx = 2\nb\n"
    assert (success.lines_removed, success.lines_added) == (1, 1)
    assert tool.phase is Phase.DONE


def test_str_replace_missing_and_ambiguous_send_no_write() -> None:
    args = {"path": "m.py", "old_string": "zzz", "new_string": "y"}
    tool, step, ids = _str_replace(args, "abc")
    done = finished(step)
    assert done.result.is_error and "old_string was not found in m.py" in done.result.text
    assert ids.next == 2  # no write exec allocated
    assert completed(done).edit_tool_call.result.error.model_visible_error == done.result.text
    assert tool.phase is Phase.DONE

    args = {"path": "m.py", "old_string": "a", "new_string": "b"}
    _tool, step, ids = _str_replace(args, "a a a")
    done = finished(step)
    assert done.result.is_error and "occurs 3 times" in done.result.text and ids.next == 2


def test_str_replace_all() -> None:
    args = {"path": "m.py", "old_string": "a", "new_string": "b", "replace_all": True}
    tool, step, _ = _str_replace(args, "a a a")
    assert sent(step)[0].exec_server_message.write_args.file_text == "b b b"
    done = finished(tool.feed(reply(2, write_result=a.WriteResult(success=a.WriteSuccess())), T0))
    assert done.result.text == "Edited m.py: replaced 3 occurrences."
    assert completed(done).edit_tool_call.result.success.lines_removed == 3


def test_str_replace_counts_the_lines_of_multi_line_strings() -> None:
    args = {"path": "m", "old_string": "a\nb", "new_string": "c\nd\ne", "replace_all": "true"}
    tool, step, _ = _str_replace(args, "a\nb\na\nb\n")
    assert sent(step)[0].exec_server_message.write_args.file_text == "c\nd\ne\nc\nd\ne\n"
    done = finished(tool.feed(reply(2, write_result=a.WriteResult(success=a.WriteSuccess())), T0))
    success = completed(done).edit_tool_call.result.success
    assert (success.lines_removed, success.lines_added) == (4, 6)
    args = {"path": "m", "old_string": "a\nb", "new_string": ""}
    tool, step, _ = _str_replace(args, "xa\nby")
    assert sent(step)[0].exec_server_message.write_args.file_text == "xy"
    done = finished(tool.feed(reply(2, write_result=a.WriteResult(success=a.WriteSuccess())), T0))
    success = completed(done).edit_tool_call.result.success
    assert (success.lines_removed, success.lines_added) == (2, 0)


def test_str_replace_file_not_found_and_failed_write() -> None:
    tool, _out, _ = start("StrReplace", {"path": "q", "old_string": "a", "new_string": "b"})
    nf = a.ReadResult(file_not_found=a.ReadFileNotFound(path="q"))
    done = finished(tool.feed(reply(1, read_result=nf), T0))
    assert done.result.is_error and "file not found" in done.result.text
    assert completed(done).edit_tool_call.result.file_not_found.path == "q"

    tool, _step, _ = _str_replace({"path": "q", "old_string": "a", "new_string": "b"}, "a")
    rej = a.WriteResult(rejected=a.WriteRejected(path="q", reason="user said no"))
    done = finished(tool.feed(reply(2, write_result=rej), T0))
    assert done.result.is_error and "The edit was not applied." in done.result.text
    assert done.result.text == "The user rejected writing q: user said no The edit was not applied."
    assert completed(done).edit_tool_call.result.rejected.reason == "user said no"


@pytest.mark.parametrize(
    ("read", "expect"),
    [
        (a.ReadSuccess(data=b"\xff\xfe"), "Error: q is a binary file; it cannot be edited."),
        (
            a.ReadSuccess(content="a", truncated=True),
            "Error: the client returned only part of q; it was not edited.",
        ),
    ],
)
def test_str_replace_refuses_binary_and_partial_files(read: a.ReadSuccess, expect: str) -> None:
    tool, _out, ids = start("StrReplace", {"path": "q", "old_string": "a", "new_string": "b"})
    done = finished(tool.feed(reply(1, read_result=a.ReadResult(success=read)), T0))
    assert done.result.is_error and done.result.text == expect and ids.next == 2
    assert completed(done).edit_tool_call.result.error.error == expect


def test_str_replace_takes_each_reply_only_in_its_own_phase() -> None:
    # A write result before the read was answered (the old code crashed on a successful one).
    tool, _out, _ = start("StrReplace", {"path": "q", "old_string": "a", "new_string": "b"})
    ok = a.WriteResult(success=a.WriteSuccess(path="q"))
    done = finished(tool.feed(reply(1, write_result=ok), T0))
    assert done.result.is_error
    assert "StrReplace call with an unexpected write_result reply" in done.result.text
    assert completed(done).edit_tool_call.result.error.error == done.result.text

    # A second read result once the write is out.
    tool, _step, _ = _str_replace({"path": "q", "old_string": "a", "new_string": "b"}, "a")
    assert tool.phase is Phase.WRITING
    again = a.ReadResult(success=a.ReadSuccess(content="a"))
    done = finished(tool.feed(reply(2, read_result=again), T0))
    assert "unexpected read_result reply" in done.result.text
    assert tool.phase is Phase.DONE and tool.exec_ids == set()


# -- Delete / LS -------------------------------------------------------------------------------


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
    tool, out, _ = start("Delete", {"path": "f"})
    assert esm(out).delete_args == a.DeleteArgs(path="f", tool_call_id="toolu_1")
    done = finished(tool.feed(reply(1, delete_result=result), T0))
    assert done.result.is_error is error and expect in done.result.text
    assert completed(done).delete_tool_call.result == result


def test_delete_empty_result_is_an_error() -> None:
    tool, _, _ = start("Delete", {"path": "f"})
    done = finished(tool.feed(reply(1, delete_result=a.DeleteResult()), T0))
    assert done.result.text == "Error: the client sent an empty delete result for f."
    assert completed(done).delete_tool_call.result.error.error == done.result.text


def test_ls_tree() -> None:
    tool, out, _ = start("LS", {"path": "/w"})
    assert esm(out).ls_args.path == "/w"
    root = a.LsDirectoryTreeNode(abs_path="/w", children_were_processed=True)
    sub = root.children_dirs.add(abs_path="/w/src", children_were_processed=True)
    sub.children_files.add(name="main.py")
    root.children_dirs.add(abs_path="/w/node_modules", num_files=900)
    root.children_files.add(name="README.md")
    done = finished(
        tool.feed(reply(1, ls_result=a.LsResult(success=a.LsSuccess(directory_tree_root=root))), T0)
    )
    assert done.result.text == (
        "/w/\n  node_modules/\n    [900 files, not listed]\n  src/\n    main.py\n  README.md"
    )
    assert completed(done).ls_tool_call.result.success.directory_tree_root == root
    tool, _, _ = start("LS", {"path": "/nope"})
    done = finished(tool.feed(reply(1, ls_result=a.LsResult(error=a.LsError(error="ENOENT"))), T0))
    assert done.result.is_error and "ENOENT" in done.result.text


def test_ls_timeout_rejected_and_empty() -> None:
    tool, _, _ = start("LS", {"path": "/w"})
    root = a.LsDirectoryTreeNode(abs_path="/w")
    timeout = a.LsResult(timeout=a.LsTimeout(directory_tree_root=root))
    done = finished(tool.feed(reply(1, ls_result=timeout), T0))
    assert (
        done.result.text == "/w/\n  (empty directory)\n[Listing timed out; it may be incomplete.]"
    )
    assert not done.result.is_error

    tool, _, _ = start("LS", {"path": "/w"})
    rejected = a.LsResult(rejected=a.LsRejected(reason="private"))
    done = finished(tool.feed(reply(1, ls_result=rejected), T0))
    assert done.result.is_error and done.result.text == "The user rejected listing /w: private"

    tool, _, _ = start("LS", {"path": "/w"})
    done = finished(tool.feed(reply(1, ls_result=a.LsResult()), T0))
    assert done.result.text == "Error: the client sent an empty ls result for /w."
    assert completed(done).ls_tool_call.result.error.path == "/w"
