"""A run's side of subagents (docs/subagents.md): the Task calls its turn sent, whose child
runs are expected in this process and whose tokens join the turn's totals; the parent's call
when the run is itself a helper (its progress cards are shown in the parent's Task card); and the
end of a Task call's helper looked for after a restart (FindHelper), off the run's inputs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ...llm.types import Usage
from ...loop import CallClient, FindHelper, HelperFound, RuntimeState
from ..cursor import sanitize_tool_call_id, task_progress_frame
from .runner import Runner
from .subagents import Expected, expected_of, helper_result, helper_totals

log = logging.getLogger("cursor_byok.runtime")

# How often a Task call waiting on its helper's end after a restart reads the store again (a
# helper whose run ends in this process wakes it at once).
RECHECK_S = 5.0


class RunHelpers:
    """The helpers of one run (`request_id`, of `conversation_id`)."""

    def __init__(self, runner: Runner, request_id: str) -> None:
        self.runner = runner
        self.request_id = request_id
        self.conversation_id = ""  # once the run request named it
        self.calls: list[str] = []  # the tool-call ids of this run's Task calls
        self.parent: Expected | None = None  # a child run's parent call, when known
        self._finding: asyncio.Task[None] | None = None  # FindHelper's wait

    def expect(self, command: CallClient, state: RuntimeState) -> None:
        """The Task call `command` went out: its child run is expected next."""
        expected = expected_of(
            command, state.committed.context, self.conversation_id, self.request_id
        )
        self.calls.append(expected.tool_call_id)
        self.runner.children.expect(expected)

    def cancel(self, subagent_id: str, person: str | None) -> None:
        """`person` canceled helper `subagent_id` (cancel_subagent_action): its run, when it
        is going in this process and is that person's, ends canceled (the runner tells it)."""
        found = self.runner.cancel_child(subagent_id, person)
        log.info(
            "run %s: cancel of helper %s (%s)",
            self.request_id,
            subagent_id,
            "its run was canceled" if found else "no run of it is going here",
        )

    def progress_to_parent(self, card: bytes) -> None:
        """A helper's progress card, shown in its parent's Task card too (when the parent's
        run is going in this process)."""
        call = self.parent
        if call is None or not call.card_call_id:
            return
        frame = task_progress_frame(call.card_call_id, call.model_call_id, card)
        self.runner.helper_progress(call.parent_conversation_id, frame)

    async def totals(self) -> tuple[Usage, float] | None:
        """The tokens and cost of the helpers this run's Task calls started (None: none)."""
        if not self.calls:
            return None
        store = self.runner.services.store
        return await helper_totals(store, self.conversation_id, self.calls)

    def find(self, command: FindHelper, deliver: Callable[[HelperFound], None]) -> None:
        """Look for the end of the helper a Task call sent before a restart started, without
        holding up the run: `deliver` gets one HelperFound, at the helper's end (this
        process's runner says when a run of it ends here; the store is read again every
        RECHECK_S for one ending elsewhere) or at the call's deadline."""
        if self._finding is not None and not self._finding.done():
            return
        self._finding = asyncio.get_running_loop().create_task(self._find(command, deliver))

    async def _find(self, command: FindHelper, deliver: Callable[[HelperFound], None]) -> None:
        services = self.runner.services
        states = self.runner.committed_states
        call = command.tool_call
        deadline = asyncio.get_running_loop().time() + services.question_timeout_s
        try:
            while True:
                child, result = await helper_result(
                    services.store, states, self.conversation_id, call
                )
                left = deadline - asyncio.get_running_loop().time()
                if not child or result is not None or left <= 0:
                    break
                await self.runner.helper_ended(child, min(RECHECK_S, left))
        except Exception as exc:  # the store failed: the outcome stays unknown
            log.warning(
                "run %s: could not look for the helper of %s: %s", self.request_id, call.id, exc
            )
            child, result = "", None
        if result is not None:
            log.info(
                "conversation %s: the Task call %s gets the report of helper %s, read from "
                "its conversation",
                self.conversation_id,
                call.id,
                child,
            )
            self.calls.append(sanitize_tool_call_id(call.id))
        found = HelperFound(command.operation_id, result, operations=command.operations)
        deliver(found)

    def close(self) -> None:
        if self._finding is not None:
            self._finding.cancel()
