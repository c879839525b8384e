"""The result texts: the middle cut, Shell's stdout/stderr split, the grep and ls layouts."""

from __future__ import annotations

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import (
    MAX_RESULT_CHARS,
    clip_middle,
    format_grep,
    format_ls,
    format_shell,
)


def test_clip_middle_keeps_a_third_of_head_and_the_rest_as_tail() -> None:
    assert clip_middle("abc", 3) == "abc"
    text = "".join(chr(ord("a") + i % 26) for i in range(100))
    cut = clip_middle(text, 30)
    assert cut == f"{text[:10]}\n[... 70 characters omitted ...]\n{text[-20:]}"
    assert clip_middle("x" * (MAX_RESULT_CHARS + 1)).count("x") == MAX_RESULT_CHARS


def test_format_shell_gives_stderr_at_most_a_third_when_both_are_long() -> None:
    out, err = "O" * 40_000, "E" * 40_000
    text = format_shell(0, out, err)
    stdout_part, stderr_part = text.split("\nstderr:\n")
    assert stdout_part.startswith("Exit code: 0\nstdout:\n")
    stdout_clip = stdout_part.removeprefix("Exit code: 0\nstdout:\n")
    assert stdout_clip.count("O") == MAX_RESULT_CHARS - MAX_RESULT_CHARS // 3
    # stderr keeps what the cut stdout (its note included) left of the budget.
    assert stderr_part.count("E") == MAX_RESULT_CHARS - len(stdout_clip)
    assert stderr_part.endswith("E" * 100) and "characters omitted" in stderr_part
    assert format_shell(None, "", "", "note") == "note\n(no output)"
    assert format_shell(2, "", "bad") == "Exit code: 2\nstderr:\nbad"


def test_format_ls_of_an_empty_directory_and_without_a_path() -> None:
    assert format_ls(a.LsDirectoryTreeNode(abs_path="/w/")) == "/w/\n  (empty directory)"
    assert format_ls(a.LsDirectoryTreeNode()) == "./\n  (empty directory)"


def test_format_grep_uses_the_active_editor_only_without_workspace_results() -> None:
    success = a.GrepSuccess()
    success.active_editor_result.files.files.append("open.py")
    assert format_grep(success) == "open.py"
    success.workspace_results["/w"].files.files.append("ws.py")
    assert format_grep(success) == "ws.py"
    line = a.GrepSuccess()
    fm = line.workspace_results["/w"].content.matches.add(file="a.py")
    fm.matches.add(line_number=1, content="x" * 10, content_truncated=True)
    assert format_grep(line) == "a.py:\n  1: xxxxxxxxxx [line truncated]"
