"""The tool call a run has on its client: its operation record and its deadline.

Every call of a response at once (the loop sends them together and takes their answers in
any order); one record and one deadline per call. The dialect's tool
machine does the protocol (`ClientLink.start_tool`); this keeps what the runtime needs around
it: the record to complete when the answer comes, and the timer that reports the call lost
(`ToolLost`, timed out) when the client never answers: `timeout_s` for an exec,
`question_timeout_s` for a call whose answer waits on a person (a question form, an approval).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ...loop import CallClient, ConversationState, catalogue
from ...store.api import ClientOperationRecord
from ..cursor import ClientLink, McpDirectory, ToolStarted
from . import records


@dataclass(slots=True)
class _InFlight:
    record: ClientOperationRecord
    started_ms: int
    timer: asyncio.Task[None] | None = None


class ToolCalls:
    def __init__(
        self,
        link: ClientLink,
        *,
        timeout_s: float,
        question_timeout_s: float | None = None,
        now_ms: Callable[[], int],
        on_timeout: Callable[[str, int], Awaitable[None]],
    ) -> None:
        self.link = link
        self.timeout_s = timeout_s
        self.question_timeout_s = timeout_s if question_timeout_s is None else question_timeout_s
        self._now_ms = now_ms
        self._on_timeout = on_timeout
        self._records: dict[str, ClientOperationRecord] = {}  # planned in this run's commits
        self._current: dict[str, _InFlight] = {}

    def planned(self, command: CallClient, state: ConversationState) -> ClientOperationRecord:
        """The operation's record for the commit that decides it (status "sent")."""
        calls = getattr(state.waiting, "calls", ())
        # the call's place in its message (its operations all go out at once)
        index = next((k for k, c in enumerate(calls) if c.id == command.tool_call.id), 0)
        record = records.sent_operation(
            command,
            conversation_id=state.conversation_id,
            turn_id=state.turn_id,
            index=index,
            now_ms=self._now_ms(),
        )
        self._records[command.operation_id] = record
        return record

    def remember(self, record: ClientOperationRecord) -> None:
        """A record read from the store (a resumed turn's operation)."""
        self._records.setdefault(record.operation_id, record)

    def record(self, operation_id: str) -> ClientOperationRecord | None:
        return self._records.get(operation_id)

    def running(self, operation_id: str) -> bool:
        return operation_id in self._current

    def start(self, command: CallClient, state: ConversationState) -> ToolStarted:
        """Start the call on the client; the caller sends `frames` (and delivers `early`)."""
        record = self._records.get(command.operation_id) or self.planned(command, state)
        context = state.context
        route = None
        if context is not None:
            route = next((r for r in context.mcp_routes if r.name == command.tool_call.name), None)
        started = self.link.start_tool(
            command.operation_id,
            command.tool_call,
            llm_call_id=command.llm_call_id,
            content_index=command.content_index,
            route=route,
            terminals_folder=context.environment.terminals_folder if context else None,
            budget_ms=int(self.timeout_s * 1000),
            mode=context.mode if context is not None else "agent",
            keep_stdin=context is not None
            and catalogue.keeps_stdin(context.mode, context.switches),
            mcp_directory=McpDirectory.of(context),
            workspace_root=(
                context.environment.workspace_paths[0]
                if context is not None and context.environment.workspace_paths
                else None
            ),
            subagents=context.subagents if context is not None else None,
        )
        flight = _InFlight(record=record, started_ms=self._now_ms())
        if started.early is None:
            flight.timer = asyncio.create_task(self._deadline(command.operation_id))
        self._current[command.operation_id] = flight
        return started

    async def _deadline(self, operation_id: str) -> None:
        person = self.link.waits_on_person(operation_id)
        await asyncio.sleep(self.question_timeout_s if person else self.timeout_s)
        flight = self._current.get(operation_id)
        if flight is None or not self.link.tool_running(operation_id):
            return  # answered meanwhile: its result is on its way to the loop
        await self._on_timeout(operation_id, self._now_ms() - flight.started_ms)

    def finished(self, operation_id: str) -> ClientOperationRecord | None:
        """The call is over (answered, or given up on): its record, to complete; the timer
        stops."""
        flight = self._current.pop(operation_id, None)
        if flight is None:
            return self._records.get(operation_id)
        if flight.timer is not None and flight.timer is not asyncio.current_task():
            flight.timer.cancel()
        return flight.record

    def abort(self, operation_id: str) -> tuple[bytes, ...]:
        """Give up on the call: its abort frames (the caller sends them)."""
        self.finished(operation_id)
        return self.link.abort_tool(operation_id)

    def abort_all(self) -> tuple[bytes, ...]:
        frames: list[bytes] = []
        for operation_id in list(self._current):
            frames.extend(self.abort(operation_id))
        return tuple(frames)
