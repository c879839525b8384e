"""ReadLints on the client: one diagnostics_args exec per path, one after the other, merged into
one read_lints_tool_call card and one text."""

from __future__ import annotations

from typing import Any

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import Phase
from cursor_byok.transport.cursor.tools.lints import MAX_LINT_PATHS, lint_paths
from tests.cursor.tool_support import (
    T0,
    begin,
    completed,
    esm,
    finished,
    reply,
    sent,
    start,
    started_card,
)

ERROR = a.DIAGNOSTIC_SEVERITY_ERROR
WARNING = a.DIAGNOSTIC_SEVERITY_WARNING


def diag(line: int, col: int, message: str, severity: Any = ERROR, **kw: Any) -> a.Diagnostic:
    d = a.Diagnostic(severity=severity, message=message, **kw)
    d.range.start.line, d.range.start.column = line, col
    d.range.end.line, d.range.end.column = line, col + 3
    return d


def found(path: str, *diagnostics: a.Diagnostic) -> a.DiagnosticsResult:
    return a.DiagnosticsResult(
        success=a.DiagnosticsSuccess(
            path=path, diagnostics=diagnostics, total_diagnostics=len(diagnostics)
        )
    )


def test_one_exec_per_path_then_one_merged_card() -> None:
    tool, out, _ = start("ReadLints", {"paths": ["/w/a.py", "/w/b.ts"]})
    assert list(started_card(out).read_lints_tool_call.args.paths) == ["/w/a.py", "/w/b.ts"]
    first = esm(out)
    assert first.diagnostics_args == a.DiagnosticsArgs(path="/w/a.py", tool_call_id="toolu_1")
    d1 = diag(3, 5, "undefined name 'x'", source="pyright", code="reportUndefinedVariable")
    d2 = diag(9, 1, "unused import", WARNING, source="ruff", code="F401", is_stale=True)
    (second,) = sent(tool.feed(reply(first.id, diagnostics_result=found("/w/a.py", d1, d2)), T0))
    req = second.exec_server_message
    assert req.id == 2 and tool.exec_ids == {2} and tool.phase is Phase.RUNNING
    assert req.diagnostics_args == a.DiagnosticsArgs(path="/w/b.ts", tool_call_id="toolu_1")
    done = finished(tool.feed(reply(2, diagnostics_result=found("/w/b.ts")), T0))
    assert done.result.text == (
        "/w/a.py:3:5 error undefined name 'x' (pyright reportUndefinedVariable)\n"
        "/w/a.py:9:1 warning unused import (ruff F401) [stale]"
    )
    assert not done.result.is_error
    card = completed(done).read_lints_tool_call
    assert list(card.args.paths) == ["/w/a.py", "/w/b.ts"]
    ok = card.result.success
    assert (ok.total_files, ok.total_diagnostics) == (1, 2)
    (fd,) = ok.file_diagnostics
    assert (fd.path, fd.diagnostics_count) == ("/w/a.py", 2)
    item = fd.diagnostics[1]
    assert (item.severity, item.message, item.source, item.code, item.is_stale) == (
        WARNING, "unused import", "ruff", "F401", True,
    )  # fmt: skip
    assert (item.range.start.line, item.range.start.column, item.range.end.column) == (9, 1, 4)


def test_no_paths_asks_for_the_whole_workspace() -> None:
    tool, out, _ = start("ReadLints", {})
    assert esm(out).diagnostics_args == a.DiagnosticsArgs(path="", tool_call_id="toolu_1")
    assert list(started_card(out).read_lints_tool_call.args.paths) == []
    done = finished(tool.feed(reply(1, diagnostics_result=found("")), T0))
    assert done.result.text == "No linter errors found."
    ok = completed(done).read_lints_tool_call.result.success
    assert (ok.total_files, ok.total_diagnostics, list(ok.file_diagnostics)) == (0, 0, [])


def test_failures_per_path_and_all_failed_is_an_error() -> None:
    tool, _out, _ = start("ReadLints", {"paths": ["/w/gone.py", "/w/ok.py"]})
    tool.feed(reply(1, diagnostics_result=a.DiagnosticsResult(
        file_not_found=a.DiagnosticsFileNotFound(path="/w/gone.py"))), T0)  # fmt: skip
    done = finished(tool.feed(reply(2, diagnostics_result=found("/w/ok.py")), T0))
    assert done.result.text == "No linter errors found.\n/w/gone.py: file not found"
    assert not done.result.is_error
    assert completed(done).read_lints_tool_call.result.HasField("success")

    tool, _out, _ = start("ReadLints", {"paths": "/w/x.py"})  # a lone string is one path
    rejected = a.DiagnosticsResult(rejected=a.DiagnosticsRejected(reason="not now"))
    done = finished(tool.feed(reply(1, diagnostics_result=rejected), T0))
    assert done.result.is_error
    assert done.result.text == "/w/x.py: the user rejected reading diagnostics: not now"
    assert completed(done).read_lints_tool_call.result.error.error_message == done.result.text


def test_paths_are_capped_and_checked() -> None:
    paths = [f"/w/f{i}.py" for i in range(MAX_LINT_PATHS + 3)]
    tool, _out, ids = start("ReadLints", {"paths": [*paths, paths[0], ""]})
    for i in range(MAX_LINT_PATHS - 1):
        (nxt,) = sent(tool.feed(reply(i + 1, diagnostics_result=found(paths[i])), T0))
        assert nxt.exec_server_message.diagnostics_args.path == paths[i + 1]
    done = finished(tool.feed(reply(MAX_LINT_PATHS, diagnostics_result=found("")), T0))
    assert ids.next == MAX_LINT_PATHS + 1
    assert done.result.text.endswith(
        "[3 more path(s) were not checked: at most 20 per call. Call ReadLints again for the rest.]"
    )
    assert lint_paths({"paths": ["a", 3]}) is None
    _tool, started, ids = begin("ReadLints", {"paths": {"a": 1}})
    assert started.early is not None and started.early.result.is_error
    assert started.early.result.text.startswith("Error: paths must be a list")
    assert ids.next == 1  # nothing was sent


def test_an_unexpected_reply_ends_the_call() -> None:
    tool, _, _ = start("ReadLints", {"paths": ["/w/a.py"]})
    done = finished(tool.feed(reply(1, read_result=a.ReadResult()), T0))
    assert done.result.is_error and "unexpected read_result reply" in done.result.text
