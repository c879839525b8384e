"""Executing the loop's commands (design §6 `runCommand`): open or resend a model call, start a
summary, send a tool call to the client, end the turn (the final checkpoint, the helpers'
totals) or the run. The loop chose the command; this module carries it out, idempotently: a
call already streaming or a tool already on the client is left as it is."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import assert_never

from ...llm.stream import PreparedRequest
from ...loop import (
    CallClient,
    CallClients,
    CallLLM,
    Canceled,
    ContinueLLM,
    DefinitionsRead,
    Failed,
    Final,
    FindHelper,
    ReadDefinitions,
    ResendLLM,
    Summarize,
    Transition,
    WaitInput,
)
from ...store.api import Reservation, ReservationTotals
from ..connect.channel import RunChannel
from ..cursor import Ending, canceled_end, summary_started, text_delta, turn_ended
from .checkpoints import MarksWrite, PendingBlob
from .ending import failure_ending
from .mcp_definitions import read_definitions
from .publish import Publisher
from .requests import ClientRequests
from .routing import ClientMessages, Work
from .run_helpers import RunHelpers
from .run_parts import RunParts
from .summary import RunSummary
from .tools import ToolCalls

log = logging.getLogger("cursor_byok.runtime")


class Commands:
    """The command executor of one run, made once its run request named the model."""

    def __init__(
        self,
        *,
        channel: RunChannel,
        publisher: Publisher,
        tools: ToolCalls,
        requests: ClientRequests,
        route: ClientMessages,
        inbox: asyncio.Queue[Work],
        helpers: RunHelpers,
        summary: RunSummary,
        end: Callable[[Ending | None, str], None],
    ) -> None:
        self.channel = channel
        self.parts: RunParts | None = None  # once the run request named the model
        self.publisher = publisher
        self.tools = tools
        self.requests = requests
        self.route = route
        self.inbox = inbox
        self.helpers = helpers
        self.summary = summary
        self.end = end
        # The final checkpoint's blob, sent before the commit that ends the turn.
        self._pending_blob: PendingBlob | None = None
        self._reads: asyncio.Task[None] | None = None  # a ReadDefinitions being carried out

    async def execute(self, t: Transition, prepared: PreparedRequest | None = None) -> None:
        command = t.command
        if isinstance(command, ContinueLLM | WaitInput):
            return
        parts = self.parts
        assert parts is not None
        match command:
            case CallLLM(call_id=call_id):
                self.publisher.encoder(call_id)
                parts.calls.open(call_id, prepared or parts.calls.prepare(command))
            case ResendLLM(call_id=call_id):
                self.publisher.encoder(call_id)
                refused = await parts.calls.resend(
                    command,
                    partial(parts.admissions.reservation, command),
                    parts.admissions.now_ms(),
                )
                self._refused(parts, command, refused)
            case Summarize():
                self.channel.send(summary_started())
                refused = await parts.summaries.start(
                    command,
                    prepared,
                    partial(parts.admissions.reservation, command),
                    parts.admissions.now_ms(),
                )
                self._refused(parts, command, refused)
            case CallClient():
                self._call_client(parts, command)
            case CallClients(calls=calls):  # every call of the response at once
                for call in calls:
                    self._call_client(parts, call)
            case ReadDefinitions():
                self._read(parts, command)
            case FindHelper(operation_id=op):
                self.helpers.find(
                    command, lambda found: self.inbox.put_nowait(Work(found, f"{op}:helper"))
                )
            case Final(message=message, replay=replay):
                if replay:
                    # An answer committed before, which the client may not have seen.
                    if message.text:
                        self.channel.send(text_delta(message.text))
                    self.channel.send(turn_ended(message.usage))
                else:
                    # The protocol's order: turn_ended (the client stops showing
                    # "generating"), then the final checkpoint, then the end of the stream.
                    helpers = await self.helpers.totals()
                    if helpers is not None:  # the helpers' tokens join the turn's totals
                        self.summary.helper_usage, self.summary.helper_cost_usd = helpers
                    self.channel.send(turn_ended(self.summary.usage + self.summary.helper_usage))
                    await self._publish_checkpoint(parts)
                self.end(None, "ok")
            case Failed(message=message, kind=kind, limit=limit):
                self.stop_everything()
                text = message.error_message or "the model call failed"
                if limit is not None:
                    self.summary.refused_by = limit.value
                    log.info(
                        "run %s: %s limit refused a model call: %s",
                        self.channel.request_id,
                        limit.value,
                        text,
                    )
                self.end(failure_ending(kind, text, limit), "failed")
            case Canceled(reason=reason):
                self.stop_everything()
                self.end(canceled_end(reason), "canceled")
            case _:
                assert_never(command)

    def _refused(
        self,
        parts: RunParts,
        command: ResendLLM | Summarize,
        refused: tuple[Reservation, ReservationTotals] | None,
    ) -> None:
        """A call sent again from its stored request whose reservation the store refused:
        the loop hears it as the call's admission input, and decides."""
        if refused is not None:
            answer = parts.admissions.refused(command, *refused)
            self.inbox.put_nowait(Work(answer, f"{command.call_id}:refused"))

    def _call_client(self, parts: RunParts, command: CallClient) -> None:
        """Send a tool call to the client (unless it is there already)."""
        op = command.operation_id
        if self.tools.running(op):
            return
        state = parts.conv.state
        started = self.tools.start(command, state.committed)
        for frame in started.frames:
            self.channel.send(frame)
        early = started.early
        if early is not None:  # unusable arguments: the answer is known at once
            self.channel.send(early.card)
            if command.to_parent:
                self.helpers.progress_to_parent(early.card)
            self.inbox.put_nowait(self.route.tool_result(op, early.result))
        elif started.wake_after_ms is not None:  # it opens by waiting
            self.route.wake_later(op, started.wake_after_ms)
        elif command.spawns:  # its child run is expected next
            self.helpers.expect(command, state)

    def _read(self, parts: RunParts, command: ReadDefinitions) -> None:
        """Read the definition files through the client (unless a read is under way); the
        answers join the inbox as one DefinitionsRead, applied once by its input id."""
        if self._reads is not None and not self._reads.done():
            return
        input_id = f"{parts.conv.state.committed.turn_id}:definitions"

        async def read() -> None:
            try:
                answer = await read_definitions(command, self.requests)
            except Exception as exc:  # the loop gets an answer: every file a failed read
                log.warning("the MCP definition files could not be read: %s", exc)
                answer = DefinitionsRead(files=())
            self.inbox.put_nowait(Work(answer, input_id))

        self._reads = asyncio.create_task(read(), name=f"definitions {input_id}")

    async def send_final_blob(self, t: Transition) -> MarksWrite | None:
        """Before the commit that ends a turn: its checkpoint blob goes to the client; the
        turn marks it publishes, to be saved with that commit, come back."""
        if isinstance(t.command, Final) and not t.command.replay and self.parts is not None:
            conv = self.parts.conv
            self._pending_blob = pending = await self.parts.checkpoints.send_blob(
                t.state.committed, conv.version
            )
            return pending.marks
        return None

    async def _publish_checkpoint(self, parts: RunParts) -> None:
        conv, checkpoints = parts.conv, parts.checkpoints
        pending, self._pending_blob = self._pending_blob, None
        if pending is None:
            pending = await checkpoints.send_blob(conv.state.committed, conv.version)
        await checkpoints.publish(pending, conv.state.committed, conv.version)

    def close(self) -> None:
        """The run is over: its pending blob is dropped and a read under way stops."""
        self.drop_pending_blob()
        if self._reads is not None:
            self._reads.cancel()

    def drop_pending_blob(self) -> None:
        pending, self._pending_blob = self._pending_blob, None
        if pending is not None and self.parts is not None:
            self.parts.checkpoints.drop(pending)

    def stop_everything(self) -> None:
        """Abort the run's tool calls (their cards go out) and its model and summary calls."""
        for frame in self.tools.abort_all():
            self.channel.send(frame)
        if self._reads is not None:
            self._reads.cancel()
        if self.parts is not None:
            self.parts.calls.close()
            self.parts.summaries.close()
