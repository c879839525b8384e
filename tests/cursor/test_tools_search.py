"""Grep and Glob on the client; Glob is a grep in files mode, retried once with "." when the
client refuses the empty pattern."""

from __future__ import annotations

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import Phase
from cursor_byok.transport.cursor.tools.search import glob_for_client, grep_args_of
from tests.cursor.tool_support import (
    T0,
    begin,
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


def test_grep_modes() -> None:
    tool, out, _ = start(
        "Grep",
        {
            "pattern": "TODO",
            "path": "src",
            "glob": "*.py",
            "output_mode": "content",
            "case_insensitive": True,
        },
    )
    ga = esm(out).grep_args
    assert (ga.pattern, ga.path, ga.glob, ga.output_mode, ga.case_insensitive) == (
        "TODO",
        "src",
        "*.py",
        "content",
        True,
    )
    assert ga.tool_call_id == "toolu_1"
    assert started_card(out).grep_tool_call.args == ga
    success = a.GrepSuccess(pattern="TODO", output_mode="content")
    fm = success.workspace_results["/w"].content.matches.add(file="src/a.py")
    fm.matches.add(line_number=3, content="# TODO fix")
    fm.matches.add(line_number=4, content="x = 1", is_context_line=True)
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text == "src/a.py:\n  3: # TODO fix\n  4- x = 1"
    assert completed(done).grep_tool_call.result.success == success

    tool, _, _ = start("Grep", {"pattern": "x", "output_mode": "count"})
    success = a.GrepSuccess()
    success.workspace_results["/w"].count.counts.add(file="a.py", count=7)
    success.workspace_results["/w"].count.client_truncated = True
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text.startswith("a.py: 7\n[Results were truncated")

    tool, _, _ = start("Grep", {"pattern": "x"})
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult(success=a.GrepSuccess())), T0))
    assert done.result.text == "No matches."
    tool, _, _ = start("Grep", {"pattern": "("})
    bad = a.GrepResult(error=a.GrepError(error="regex parse error"))
    done = finished(tool.feed(reply(1, grep_result=bad), T0))
    assert done.result.is_error and "regex parse error" in done.result.text
    assert completed(done).grep_tool_call.result == bad


def test_grep_pattern_error_is_not_retried() -> None:
    tool, _, ids = start("Grep", {"pattern": ""})
    refusal = a.GrepResult(error=a.GrepError(error="grep pattern is required"))
    done = finished(tool.feed(reply(1, grep_result=refusal), T0))
    assert done.result.text == "Error: search failed: grep pattern is required"
    assert ids.next == 2 and tool.phase is Phase.DONE


def test_grep_empty_result_is_an_error() -> None:
    tool, _, _ = start("Grep", {"pattern": "x"})
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult()), T0))
    assert done.result.text == "Error: the client sent an empty search result."
    assert completed(done).grep_tool_call.result.error.error == done.result.text


def test_glob_is_grep_in_files_mode() -> None:
    tool, out, _ = start("Glob", {"glob_pattern": "**/*.ts", "target_directory": "web"})
    started = started_card(out).glob_tool_call.args
    assert (started.glob_pattern, started.target_directory) == ("**/*.ts", "web")
    ga = esm(out).grep_args
    assert (ga.pattern, ga.glob, ga.path, ga.output_mode) == (
        "",
        "**/*.ts",
        "web",
        "files_with_matches",
    )
    success = a.GrepSuccess(output_mode="files_with_matches")
    success.workspace_results["/w"].files.files.extend(["web/a.ts", "web/b.ts"])
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text == "web/a.ts\nweb/b.ts"
    ok = completed(done).glob_tool_call.result.success
    assert list(ok.files) == ["web/a.ts", "web/b.ts"] and ok.total_files == 2
    assert (ok.pattern, ok.path) == ("**/*.ts", "web")
    tool, _, _ = start("Glob", {"glob_pattern": "*.none"})
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult(success=a.GrepSuccess())), T0))
    assert done.result.text == "No files matched."


def test_glob_takes_files_from_any_output_mode() -> None:
    tool, _, _ = start("Glob", {"glob_pattern": "*"})
    success = a.GrepSuccess()
    success.workspace_results["a"].content.matches.add(file="x.py")
    success.workspace_results["b"].count.counts.add(file="y.py", count=1)
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text == "x.py\ny.py"


def test_glob_retries_once_with_dot_when_the_client_refuses_an_empty_pattern() -> None:
    tool, _out, _ = start("Glob", {"glob_pattern": "*.txt"})
    assert tool.phase is Phase.RUNNING
    refusal = a.GrepResult(
        error=a.GrepError(error="grep pattern is required (received an empty pattern).")
    )
    frames = sent(tool.feed(reply(1, grep_result=refusal), T0))
    assert len(frames) == 1
    retry = frames[0].exec_server_message
    assert retry.id == 2 and tool.exec_ids == {2}
    assert tool.phase is Phase.RETRYING
    assert (retry.grep_args.pattern, retry.grep_args.glob) == (".", "**/*.txt")
    assert retry.grep_args.output_mode == "files_with_matches"
    assert retry.exec_id == "toolu_1"
    # The first exec's stream_close is no longer waited on.
    ignored(tool.feed(close(1), T0))
    assert tool.phase is Phase.RETRYING
    success = a.GrepSuccess()
    success.workspace_results["."].files.files.append("hello.txt")
    done = finished(tool.feed(reply(2, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text == "hello.txt"
    assert tool.phase is Phase.DONE
    # A second refusal is final.
    tool, _, ids = start("Glob", {"glob_pattern": "*.txt"})
    tool.feed(reply(1, grep_result=refusal), T0)
    done = finished(tool.feed(reply(2, grep_result=refusal), T0))
    assert done.result.is_error and "pattern is required" in done.result.text
    assert ids.next == 3 and tool.phase is Phase.DONE
    assert completed(done).glob_tool_call.result.error.error == done.result.text


def test_glob_other_errors_are_not_retried() -> None:
    tool, _, ids = start("Glob", {"glob_pattern": "*.txt"})
    error = a.GrepResult(error=a.GrepError(error="EACCES"))
    done = finished(tool.feed(reply(1, grep_result=error), T0))
    assert done.result.text == "Error: search failed: EACCES" and ids.next == 2


def test_grep_flags_map_to_grep_args() -> None:
    """Every Grep flag of Cursor's tool lands in its GrepArgs field (reference §2.8)."""
    args = {
        "pattern": "fn\\s+main",
        "path": "/w/src",
        "glob": "*.rs",
        "type": "rust",
        "output_mode": "content",
        "-A": 2,
        "-B": "1",
        "-C": 3.0,
        "-i": True,
        "head_limit": 50,
        "offset": 100,
        "multiline": True,
    }
    ga = grep_args_of(args, "call_9")
    expected = a.GrepArgs(
        pattern="fn\\s+main",
        path="/w/src",
        glob="*.rs",
        type="rust",
        output_mode="content",
        context_after=2,
        context_before=1,
        context=3,
        case_insensitive=True,
        head_limit=50,
        offset=100,
        multiline=True,
        tool_call_id="call_9",
    )
    assert ga == expected
    # Context flags are content-mode only; zero limits, negatives and junk are left out.
    ga = grep_args_of(
        {"pattern": "x", "output_mode": "count", "-A": 2, "-C": 1, "head_limit": 0,
         "offset": -3, "-i": "yes", "multiline": "false"},
        "c",
    )  # fmt: skip
    assert ga == a.GrepArgs(pattern="x", output_mode="count", multiline=False, tool_call_id="c")
    for field in ("context_after", "context", "head_limit", "offset", "case_insensitive"):
        assert not ga.HasField(field)
    # The name the catalogue used before `-i` is still read; `-i` wins when both are there.
    assert grep_args_of({"pattern": "x", "case_insensitive": True}, "c").case_insensitive
    assert not grep_args_of({"pattern": "x", "-i": False, "case_insensitive": True}, "c")\
        .case_insensitive  # fmt: skip
    # Not model parameters in Cursor's build, passed through when present.
    ga = grep_args_of({"pattern": "x", "sort": "modified", "sort_ascending": False}, "c")
    assert (ga.sort, ga.HasField("sort_ascending"), ga.sort_ascending) == ("modified", True, False)
    assert grep_args_of({"pattern": "x", "-A": 2**40}, "c").context_after == 2**31 - 1


def test_grep_bad_output_mode_is_the_models_error() -> None:
    _tool, started, _ = begin("Grep", {"pattern": "x", "output_mode": "lines"})
    assert started.early is not None and started.early.result.is_error
    assert started.early.result.text == (
        "Error: output_mode must be one of content, files_with_matches, count; got 'lines'."
    )


def test_grep_head_limit_note_says_where_to_page_on() -> None:
    tool, out, _ = start(
        "Grep", {"pattern": "x", "output_mode": "files_with_matches", "head_limit": 2,
                 "offset": 4},
    )  # fmt: skip
    ga = esm(out).grep_args
    assert (ga.head_limit, ga.offset) == (2, 4)
    success = a.GrepSuccess(output_mode="files_with_matches")
    files = success.workspace_results["/w"].files
    files.files.extend(["e.py", "f.py"])
    files.client_truncated, files.head_limit_applied, files.offset_applied = True, 2, 4
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult(success=success)), T0))
    assert done.result.text == (
        "e.py\nf.py\n[At least 6 results; more exist. Page on with offset=6 and the same "
        "head_limit, or narrow the search.]"
    )


def test_glob_prefix() -> None:
    assert glob_for_client("*.py") == "**/*.py"
    assert glob_for_client("src/*.py") == "**/src/*.py"
    assert glob_for_client("**/*.py") == "**/*.py"
    assert glob_for_client("/abs/*.py") == "/abs/*.py"
    assert glob_for_client("") == ""


def test_glob_card_carries_the_clients_truncation() -> None:
    tool, out, _ = start("Glob", {"glob_pattern": "*.md"})
    assert esm(out).grep_args.glob == "**/*.md"
    assert started_card(out).glob_tool_call.args.glob_pattern == "*.md"
    success = a.GrepSuccess(output_mode="files_with_matches")
    files = success.workspace_results["/w"].files
    files.files.extend(["a.md", "b.md"])
    files.total_files, files.client_truncated = 9, True
    done = finished(tool.feed(reply(1, grep_result=a.GrepResult(success=success)), T0))
    ok = completed(done).glob_tool_call.result.success
    assert (ok.pattern, list(ok.files), ok.total_files) == ("**/*.md", ["a.md", "b.md"], 9)
    assert (ok.client_truncated, ok.ripgrep_truncated) == (True, False)
    assert done.result.text == (
        "a.md\nb.md\n[Showing 2 files; at least 9 matched. Narrow the pattern or the directory "
        "to see the rest.]"
    )
