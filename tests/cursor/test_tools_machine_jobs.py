"""A tool machine that waits on a server job (`Send(job=...)`, `deliver`): the phase after each
event, stray replies and deliveries, abort while the job runs."""

from __future__ import annotations

from typing import Any, ClassVar

from cursor_byok.llm.types import ToolCall
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import Finished, Phase, Send, Step, ToolMachine
from cursor_byok.transport.cursor.tools.machine import Handlers, ToolSettings
from cursor_byok.web.types import JobFailed, JobOutcome, SearchHit, SearchResults, WebSearchJob
from tests.cursor.tool_support import T0, Ids, decode, ignored, reply


class _LookUp(ToolMachine):
    """Reads a file on the client, then searches on the server for what it says."""

    CARD = "web_search_tool_call"

    def _card(self) -> a.ToolCall:
        tc = self._new_card()
        tc.web_search_tool_call.args.search_term = str(self.args.get("q", ""))
        return tc

    def _set_error(self, tc: a.ToolCall, text: str) -> None:
        tc.web_search_tool_call.result.error.error = text

    def _first_exec(self) -> bytes:
        return self._exec("read_args", a.ReadArgs(path="/q.txt"))

    def _on_read(self, result: Any, now_ms: int) -> Step:
        return self._run_job(WebSearchJob(query=result.success.content))

    def _on_job_done(self, outcome: JobOutcome, now_ms: int) -> Step:
        if isinstance(outcome, SearchResults):
            return self._finish(outcome.hits[0].url, self._card(), now_ms)
        assert isinstance(outcome, JobFailed)
        return self._finish_error(outcome.message, now_ms)

    HANDLERS: ClassVar[Handlers] = {Phase.RUNNING: {"read_result": _on_read}}


def _started() -> tuple[_LookUp, int]:
    tool = _LookUp(
        ToolCall(id="toolu_1", name="LookUp", arguments={"q": "x"}),
        call_id="llm1-0",
        model_call_id="conv:1:llm1",
        settings=ToolSettings(conversation_id="conv"),
    )
    started = tool.start(Ids(), T0)
    exec_id = decode(started.frames)[1].exec_server_message.id
    return tool, exec_id


def _read(exec_id: int, content: str) -> a.ExecClientMessage:
    return reply(exec_id, read_result=a.ReadResult(success=a.ReadSuccess(content=content)))


def test_a_reply_can_hand_the_call_to_a_server_job() -> None:
    tool, exec_id = _started()
    step = tool.feed(_read(exec_id, "cats"), T0 + 1)
    assert step == Send(frames=(), job=WebSearchJob(query="cats"))
    assert tool.phase is Phase.WORKING and tool.exec_ids == frozenset()
    # the client's reply is no longer waited on
    assert "not waited on" in ignored(tool.feed(_read(exec_id, "dogs"), T0 + 2))
    done = tool.deliver(SearchResults(hits=(SearchHit(title="t", url="u"),), backend="b"), T0 + 3)
    assert isinstance(done, Finished) and done.result.text == "u" and not done.result.is_error
    assert tool.phase is Phase.DONE
    assert "runs no server job" in ignored(tool.deliver(JobFailed(message="late"), T0 + 4))


def test_a_failed_job_is_an_error_result() -> None:
    tool, exec_id = _started()
    tool.feed(_read(exec_id, "cats"), T0 + 1)
    done = tool.deliver(JobFailed(message="search backend answered 503"), T0 + 2)
    assert isinstance(done, Finished) and done.result.is_error
    assert done.result.text == "search backend answered 503"


def test_a_delivery_before_any_job_is_ignored() -> None:
    tool, _ = _started()
    assert "runs no server job" in ignored(tool.deliver(JobFailed(message="x"), T0 + 1))
    assert tool.phase is Phase.RUNNING


def test_abort_while_the_job_runs() -> None:
    tool, exec_id = _started()
    tool.feed(_read(exec_id, "cats"), T0 + 1)
    assert tool.abort() == ()  # nothing is out on the client
    assert tool.phase is Phase.ABORTED
    assert "runs no server job" in ignored(tool.deliver(JobFailed(message="x"), T0 + 2))
