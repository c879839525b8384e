"""A run's side of subagents (docs/subagents.md): the Task calls its turn sent, whose child
runs are expected in this process and whose tokens join the turn's totals; the parent's call
when the run is itself a helper (its progress cards are shown in the parent's Task card); and a
Task result rebuilt from its helper's conversation when the turn resumes after a restart."""

from __future__ import annotations

import msgspec

from ...llm.types import Usage
from ...loop import AwaitClient, CallClient, Resume, RuntimeState, ids
from ...loop.inputs import ToolOperation
from ..cursor import sanitize_tool_call_id, task_progress_frame
from .runner import Runner
from .subagents import Expected, expected_of, helper_totals, recovered


class RunHelpers:
    """The helpers of one run (`request_id`, of `conversation_id`)."""

    def __init__(self, runner: Runner, request_id: str) -> None:
        self.runner = runner
        self.request_id = request_id
        self.conversation_id = ""  # once the run request named it
        self.calls: list[str] = []  # the tool-call ids of this run's Task calls
        self.parent: Expected | None = None  # a child run's parent call, when known

    def expect(self, command: CallClient, state: RuntimeState) -> None:
        """The Task call `command` went out: its child run is expected next."""
        expected = expected_of(
            command, state.committed.context, self.conversation_id, self.request_id
        )
        self.calls.append(expected.tool_call_id)
        self.runner.children.expect(expected)

    def progress_to_parent(self, card: bytes) -> None:
        """A helper's progress card, shown in its parent's Task card too (when the parent's
        run is going in this process)."""
        call = self.parent
        if call is None or not call.card_call_id:
            return
        parent = self.runner.active_run(call.parent_conversation_id)
        if parent is not None:
            parent.channel.send(task_progress_frame(call.card_call_id, call.model_call_id, card))

    async def totals(self) -> tuple[Usage, float] | None:
        """The tokens and cost of the helpers this run's Task calls started (None: none)."""
        if not self.calls:
            return None
        store = self.runner.services.store
        return await helper_totals(store, self.conversation_id, self.calls)

    async def recover(self, resume: Resume, state: RuntimeState) -> Resume:
        """`resume` with the result of each Task call sent before a restart, read from its
        helper's conversation once that helper's turn is over (subagents.recovered)."""
        waiting = state.committed.waiting
        if not resume.operations or not isinstance(waiting, AwaitClient):
            return resume
        services = self.runner.services
        calls = {ids.operation_id(waiting.call_id, c.id): c for c in waiting.calls}
        operations: list[ToolOperation] = []
        for op in resume.operations:
            call = calls.get(op.operation_id)
            found = op
            if call is not None:
                found = await recovered(
                    op,
                    call,
                    self.conversation_id,
                    services.store,
                    self.runner.committed_states,
                    services.question_timeout_s,
                )
            if found is not op and call is not None:  # a Task result rebuilt from its helper
                self.calls.append(sanitize_tool_call_id(call.id))
            operations.append(found)
        if all(a is b for a, b in zip(operations, resume.operations, strict=True)):
            return resume
        return msgspec.structs.replace(
            resume, operation=operations[0], operations=tuple(operations)
        )
