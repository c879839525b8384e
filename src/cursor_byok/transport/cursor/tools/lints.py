"""ReadLints: the IDE's diagnostics (linter and compiler problems) for the files the model names.

`diagnostics_args` takes one path, so the call asks once per path, one exec after the other,
and merges the answers into one `read_lints_tool_call` card. With no path it asks once with
an empty path, which is meant as "the whole workspace": whether the IDE answers that with every
diagnostic is unverified (reference §2.9 [U]); a client that answers it with nothing gives
"no problems found", which is what the model would read anyway.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ....llm.types import ToolCall
from ..proto import agent_pb2
from .format import clip_middle
from .machine import Finished, Handlers, Phase, Step, ToolMachine, ToolSettings

__all__ = ["MAX_LINT_PATHS", "ReadLintsMachine", "format_diagnostic", "lint_paths"]

# At most this many paths per call, one exec each; the model is told about the rest.
MAX_LINT_PATHS = 20

_SEVERITY = {
    agent_pb2.DIAGNOSTIC_SEVERITY_ERROR: "error",
    agent_pb2.DIAGNOSTIC_SEVERITY_WARNING: "warning",
    agent_pb2.DIAGNOSTIC_SEVERITY_INFORMATION: "info",
    agent_pb2.DIAGNOSTIC_SEVERITY_HINT: "hint",
}


def lint_paths(args: dict[str, Any]) -> tuple[str, ...] | None:
    """The model's `paths`: a tuple of the non-empty strings in it, () when absent (the whole
    workspace), None when it is not a list of strings. A lone string counts as one path."""
    value = args.get("paths")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        return None
    return tuple(dict.fromkeys(p for p in value if p))


def format_diagnostic(path: str, d: agent_pb2.Diagnostic) -> str:
    """`path:line:col severity message (source code)`; line and column as the client gave
    them."""
    where = f"{path}:{d.range.start.line}:{d.range.start.column}"
    origin = " ".join(part for part in (d.source, d.code) if part)
    text = f"{where} {_SEVERITY.get(d.severity, 'problem')} {d.message}"
    if origin:
        text += f" ({origin})"
    if d.is_stale:
        text += " [stale]"
    return text


class ReadLintsMachine(ToolMachine):
    CARD = "read_lints_tool_call"

    def __init__(
        self, tool_call: ToolCall, *, call_id: str, model_call_id: str, settings: ToolSettings
    ) -> None:
        super().__init__(tool_call, call_id=call_id, model_call_id=model_call_id, settings=settings)
        paths = lint_paths(self.args) or ()
        self._paths: tuple[str, ...] = paths[:MAX_LINT_PATHS] or ("",)
        self._skipped = max(len(paths) - MAX_LINT_PATHS, 0)
        self._answers: list[tuple[str, agent_pb2.DiagnosticsResult]] = []

    def _argument_problem(self) -> str | None:
        if lint_paths(self.args) is None:
            return (
                "Error: paths must be a list of file or directory paths (strings); leave it "
                "out to check the whole workspace."
            )
        return None

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.read_lints_tool_call.args.paths.extend(p for p in self._paths if p)
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.read_lints_tool_call.result.error.error_message = text

    def _request(self, path: str) -> agent_pb2.DiagnosticsArgs:
        return agent_pb2.DiagnosticsArgs(path=path, tool_call_id=self.tool_call_id)

    def _first_exec(self) -> bytes:
        return self._exec("diagnostics_args", self._request(self._paths[0]))

    def _on_diagnostics(self, result: agent_pb2.DiagnosticsResult, now_ms: int) -> Step:
        self._answers.append((self._paths[len(self._answers)], result))
        if len(self._answers) < len(self._paths):
            nxt = self._paths[len(self._answers)]
            return self._next_exec(Phase.RUNNING, "diagnostics_args", self._request(nxt))
        return self._merged(now_ms)

    def _merged(self, now_ms: int) -> Finished:
        tc = self._card()
        problems: list[str] = []
        failures: list[str] = []
        ok = agent_pb2.ReadLintsToolSuccess()
        for asked, result in self._answers:
            label = asked or "the workspace"
            match result.WhichOneof("result"):
                case "success":
                    s = result.success
                    path = s.path or asked
                    if not s.diagnostics:
                        continue
                    fd = ok.file_diagnostics.add(path=path, diagnostics_count=len(s.diagnostics))
                    for d in s.diagnostics:
                        item = fd.diagnostics.add(
                            severity=d.severity,
                            message=d.message,
                            source=d.source,
                            code=d.code,
                            is_stale=d.is_stale,
                        )
                        item.range.start.CopyFrom(d.range.start)
                        item.range.end.CopyFrom(d.range.end)
                        problems.append(format_diagnostic(path or "(workspace)", d))
                case "error":
                    failures.append(
                        f"{label}: error: {result.error.error or 'the client gave no reason'}"
                    )
                case "rejected":
                    reason = result.rejected.reason or "no reason"
                    failures.append(f"{label}: the user rejected reading diagnostics: {reason}")
                case "file_not_found":
                    failures.append(f"{label}: file not found")
                case "permission_denied":
                    failures.append(f"{label}: permission denied")
                case _:
                    failures.append(f"{label}: the client sent an empty diagnostics result")
        ok.total_files = len(ok.file_diagnostics)
        ok.total_diagnostics = len(problems)
        lines = list(problems)
        if not problems and len(failures) < len(self._answers):
            lines.append("No linter errors found.")
        lines.extend(failures)
        if self._skipped:
            lines.append(
                f"[{self._skipped} more path(s) were not checked: at most {MAX_LINT_PATHS} per "
                "call. Call ReadLints again for the rest.]"
            )
        text = clip_middle("\n".join(lines))
        if failures and len(failures) == len(self._answers):
            self._set_error(tc, text)
            return self._finish(text, tc, now_ms, is_error=True)
        tc.read_lints_tool_call.result.success.CopyFrom(ok)
        return self._finish(text, tc, now_ms)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"diagnostics_result": _on_diagnostics}}
