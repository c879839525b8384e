"""Where each client message of a run goes: an answer to what the run asked resolves its waiter
at once, a tool's reply goes to its machine (and its result to the loop), and an input for the
loop joins the run's inbox, in order; so does the transport's word that the client's stream
is gone for good (`gone`). It runs inside the transport's reading: quick, never raises."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import assert_never

from ...llm.types import ToolResultMessage
from ...loop import (
    Cancel,
    ClientGone,
    Input,
    Suspend,
    SuspendCause,
    ToolEffect,
    ToolResult,
    TurnContext,
    UserMessage,
)
from ...loop.results import CALL_STREAM_CLOSED, not_reopened
from ...store.api import ClientOperationRecord
from ...web.types import JobFailed, JobOutcome, ServerJob
from ..connect.channel import Gone, Incoming, RunChannel, StreamGone
from ..cursor import (
    BlobReceived,
    BlobStored,
    CancelRequested,
    ClientContext,
    ClientHeartbeat,
    ClientLink,
    ContextReceived,
    DefinitionRead,
    FollowUp,
    Inbound,
    InteractionAnswered,
    Malformed,
    ResumeRequested,
    RunRequested,
    Stray,
    ToolFinished,
    ToolProgress,
    UnknownEvent,
)
from . import records
from .requests import ClientRequests
from .tools import ToolCalls

log = logging.getLogger("cursor_byok.runtime")


@dataclass(frozen=True, slots=True)
class Work:
    """An input for the loop from the run's inbox. `input` None: a resume the client asked
    for (its facts are read from the store when its turn comes)."""

    input: Input | None
    input_id: str | None
    completes: ClientOperationRecord | None = None  # committed with it: the tool's answer


STOP = Work(None, "stop")
# Why the run stopped when its task is cancelled before the loop heard why (a run still going
# when the transport's stop grace passed, or cancelled by its event loop).
STOPPED = "the run was stopped"
SHUTTING_DOWN = "shutdown: the server is stopping"


class ClientMessages:
    def __init__(
        self,
        *,
        channel: RunChannel,
        link: ClientLink,
        requests: ClientRequests,
        tools: ToolCalls,
        inbox: asyncio.Queue[Work],
        now_ms: Callable[[], int],
        follow_up_context: Callable[[ClientContext], TurnContext],
        unknown_event: Callable[[str], None],
        run_job: Callable[[str, ServerJob], Awaitable[JobOutcome]] | None = None,
        job_timeout_s: float = 120.0,
    ) -> None:
        self.channel = channel
        self.link = link
        self.requests = requests
        self.tools = tools
        self.inbox = inbox
        self._now_ms = now_ms
        self._follow_up_context = follow_up_context
        self._unknown_event = unknown_event
        self._run_job = run_job
        self._job_timeout_s = job_timeout_s
        self._jobs: set[asyncio.Task[None]] = set()
        self.stop_reason = STOPPED  # what a cancelled run ends with (see `gone`)

    def gone(self, gone: StreamGone) -> None:
        """The client's stream is gone for good (RunChannel.watch_gone): the loop's input for
        it joins the inbox, and the run ends by itself; should its task be cancelled first,
        `stop_reason` says why."""
        match gone.why:
            case Gone.CLOSED:
                self.stop_reason = CALL_STREAM_CLOSED
                self.inbox.put_nowait(Work(ClientGone(), None))
            case Gone.EXPIRED:
                self.stop_reason = not_reopened(gone.grace_s)
                self.inbox.put_nowait(Work(ClientGone(grace_s=gone.grace_s), None))
            case Gone.SHUTDOWN:
                self.stop_reason = SHUTTING_DOWN
                self.inbox.put_nowait(Work(Suspend(cause=SuspendCause.SHUTDOWN), None))
            case Gone.FAILED:
                self.stop_reason = f"the transport ended the run: {gone.detail}"
            case _:
                assert_never(gone.why)

    def close(self) -> None:
        """The run is over: server jobs still running are canceled (their calls are aborted)."""
        for task in list(self._jobs):
            task.cancel()

    def __call__(self, incoming: Incoming) -> None:
        self._route(self.link.receive(incoming.message), incoming.input_id)

    def wake_later(self, operation_id: str, ms: int) -> None:
        """Wake the tool call `operation_id` after `ms` (a call that waits on a timer)."""
        asyncio.get_running_loop().call_later(ms / 1000, self._wake, operation_id)

    def _wake(self, operation_id: str) -> None:
        """A tool call's timer is up (AwaitShell between two reads)."""
        if not self.channel.finished:
            self._route(self.link.wake_tool(operation_id), f"{operation_id}:wake")

    async def _job(self, operation_id: str, job: ServerJob) -> None:
        """Run a tool call's server job, bounded; its outcome (a failure too) goes back to the
        call's machine."""
        outcome: JobOutcome
        if self._run_job is None:
            outcome = JobFailed(message="this server is not configured to run that tool")
        else:
            try:
                outcome = await asyncio.wait_for(
                    self._run_job(operation_id, job), self._job_timeout_s
                )
            except TimeoutError:
                outcome = JobFailed(
                    message=f"the server gave up after {self._job_timeout_s:g} s without an answer"
                )
            except Exception:  # a runner must not raise; never let it end the run
                log.exception("run %s: a server job failed", self.channel.request_id)
                outcome = JobFailed(message="the server failed to run the tool")
        if not self.channel.finished:
            self._route(self.link.deliver_job(operation_id, outcome), f"{operation_id}:job")

    def _route(self, inbound: Inbound, input_id: str) -> None:
        rid = self.channel.request_id
        match inbound:
            case (
                BlobReceived()
                | BlobStored()
                | ContextReceived()
                | DefinitionRead()
                | InteractionAnswered()
            ):
                if not self.requests.resolve(inbound):
                    log.debug("run %s: an answer nothing waits for: %r", rid, inbound)
            case ToolProgress(operation_id=op, frames=frames, wake_after_ms=wake, job=job):
                for frame in frames:
                    self.channel.send(frame)
                if wake is not None:
                    self.wake_later(op, wake)
                if job is not None:
                    task = asyncio.get_running_loop().create_task(self._job(op, job))
                    self._jobs.add(task)
                    task.add_done_callback(self._jobs.discard)
            case ToolFinished(operation_id=op, result=result, card=card, effect=effect):
                self.channel.send(card)
                self.inbox.put_nowait(self.tool_result(op, result, effect))
            case CancelRequested(reason=reason):
                cancel = Cancel(reason=reason) if reason else Cancel()
                self.inbox.put_nowait(Work(cancel, input_id))
            case FollowUp(message=message, context=client_context, mode=mode, acknowledge=ack):
                for frame in ack:  # an injection's answer, as the loop gets it
                    self.channel.send(frame)
                context = (
                    self._follow_up_context(client_context) if client_context is not None else None
                )
                follow = UserMessage(message=message, context=context, mode=mode)
                self.inbox.put_nowait(Work(follow, input_id))
            case ResumeRequested():
                self.inbox.put_nowait(Work(None, input_id))
            case RunRequested():
                log.warning("run %s: a second run_request was ignored", rid)
            case ClientHeartbeat():
                pass
            case Stray(kind=kind, detail=detail):
                log.debug("run %s: stray %s message: %s", rid, kind, detail)
            case UnknownEvent(kind=kind):
                self._unknown_event(kind)
            case Malformed(error=error):
                log.warning("run %s: ignored a client message: %s", rid, error)
            case _:
                assert_never(inbound)

    def tool_result(
        self, operation_id: str, result: ToolResultMessage, effect: ToolEffect | None = None
    ) -> Work:
        """The loop's input for a tool's answer, with the operation's completed record."""
        record = self.tools.finished(operation_id)
        completes = (
            records.completed_operation(record, result, self._now_ms())
            if record is not None
            else None
        )
        return Work(ToolResult(message=result, effect=effect), f"{operation_id}:result", completes)
