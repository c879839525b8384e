"""The conversation a run holds, as committed: its state, the store's version of it and how many
messages of its log the store has, and the commits that move it.

Every commit is a compare-and-set on the version (the store decides, across processes too); a
commit that loses is reloaded from the store. The state of the last commit is kept in memory for
the conversation's next turn (committed_states.py); the store stays the source of truth.

A conversation belongs to the person whose token started it (the store's `owner_id`; None: the
operator's). A run made under another person's token never takes its state: every load and
reload checks the owner (`NotYours`), and the first commit of a new conversation stores the
run's person as its owner. The operator (`viewer` None) sees every conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...llm import canonical
from ...loop import AwaitClient, ConversationState, Resume, RuntimeState, ToolOperation
from ...loop import Transition as LoopTransition
from ...store.api import (
    ClientOperationRecord,
    CommitResult,
    LLMCallRecord,
    Reservation,
    RunOutcomeRecord,
    Store,
    TurnMark,
)
from . import records
from .committed_states import CommittedStates

log = logging.getLogger("cursor_byok.runtime")


class ConversationGone(Exception):
    """The store no longer holds a conversation this run committed to."""


class NotYours(Exception):
    """The conversation belongs to another person than the one the run is made under."""


def not_yours(conversation_id: str) -> NotYours:
    return NotYours(
        f"conversation {conversation_id!r} belongs to someone else; this token may not "
        "continue, rewind, fork or read it"
    )


# What a run holds before its run request named a conversation (run.py): one state for every
# run, never committed (a frozen value, so sharing it changes nothing).
UNNAMED = RuntimeState.new("")


class Conversation:
    def __init__(
        self,
        conversation_id: str,
        store: Store,
        states: CommittedStates,
        viewer: str | None = None,
        *,
        state: RuntimeState | None = None,
    ) -> None:
        """`state`: the state to hold until `load` (default: a new conversation's)."""
        self.conversation_id = conversation_id
        self.store = store
        self.states = states
        self.viewer = viewer  # the run's person (None: the operator, who sees every one)
        self.state = state if state is not None else RuntimeState.new(conversation_id)
        self.version = 0  # 0: not in the store yet
        self.stored_count = 0  # messages of the log the store holds
        # For a conversation the store does not hold: the source its clone note names, read
        # with its head (None: no note).
        self.clone_source: str | None = None

    async def load(self) -> bool:
        """Take the committed state: the one kept from this process's last commit when the
        store still holds exactly that version, else the store's. False for a conversation the
        store does not have (the state stays new)."""
        cid = self.conversation_id
        look = await self.store.first_look(cid)
        head, self.clone_source = look.head, look.clone_source
        if head is None:
            self.states.forget(cid)
            # What the first commit adds is counted by `advance`.
            self.states.remember(cid, 0, self.state.committed, 0)
            return False
        self._check_owner(head.owner_id)
        kept = self.states.get(cid, head)
        if kept is not None:
            state, self.version = kept
            self._take(state)
            return True
        return await self.reload()

    async def reload(self) -> bool:
        record = await self.store.load(self.conversation_id)
        if record is None:
            return False
        self._check_owner(record.owner_id)
        state = records.decode_state(record.state, record.messages)
        size = len(record.state) + sum(len(m) for m in record.messages)
        self.states.remember(record.conversation_id, record.version, state, size)
        self.version = record.version
        self._take(state)
        return True

    def _check_owner(self, owner: str | None) -> None:
        if self.viewer is not None and owner != self.viewer:
            raise not_yours(self.conversation_id)

    def _take(self, state: ConversationState) -> None:
        self.state = RuntimeState.of(state)
        self.stored_count = len(state.log)

    async def commit(
        self,
        t: LoopTransition,
        input_id: str | None,
        *,
        calls: Sequence[LLMCallRecord],
        operations: Sequence[ClientOperationRecord],
        durable: bool,
        reserve: Reservation | None = None,
        turn_marks: Sequence[TurnMark] | None = None,
        unchanged_marks: int = 0,
        run_outcome: RunOutcomeRecord | None = None,
    ) -> CommitResult:
        """Store what `t` committed (its state, the messages it appended, the records); on
        success it is this conversation's state. A conflict or a duplicate reloads the state
        the store holds; a refused reservation changes nothing (the caller hears the totals).
        `turn_marks` and `run_outcome` ride along (Store.commit_input): written only if this
        commits."""
        after = t.state.committed
        appended = [canonical.encode_message(m) for m in t.appended]
        outcome = await self.store.commit_input(
            self.conversation_id,
            input_id=input_id or after.last_commit_id,
            expected_version=self.version,
            state=records.encode_state(after),
            append_messages=appended,
            expected_message_count=self.stored_count,
            result=records.command_record(t.command),
            llm_calls=calls,
            client_operations=operations,
            durable=durable,
            owner=self.viewer if self.version == 0 else None,
            reserve=reserve,
            turn_marks=turn_marks,
            unchanged_marks=unchanged_marks,
            run_outcome=run_outcome,
        )
        if outcome.status == "refused":
            return outcome
        if outcome.status == "committed":
            self.states.advance(
                self.conversation_id,
                self.version,
                outcome.version,
                after,
                sum(len(m) for m in appended),
            )
            self.version = outcome.version
            self.stored_count += len(appended)
            self.state = t.state
            return outcome
        # Another writer moved the conversation (or this input was already applied): reload.
        old = self.version
        if not await self.reload():
            raise ConversationGone("the conversation disappeared from the store")
        log.info(
            "conversation %s changed under this run (%s at version %d); reloaded at version %d",
            self.conversation_id,
            outcome.status,
            old,
            self.version,
        )
        return outcome

    async def resume(self, turn_id: str | None) -> tuple[Resume, tuple[ClientOperationRecord, ...]]:
        """A Resume with what the store knows of each operation the turn waits on, and their
        records."""
        waiting = self.state.committed.waiting
        if not isinstance(waiting, AwaitClient) or not waiting.unanswered():
            return Resume(turn_id=turn_id), ()
        found: list[ClientOperationRecord] = []
        operations: list[ToolOperation] = []
        for operation_id in waiting.unanswered():
            record = await self.store.get_client_operation(operation_id)
            if record is None:
                continue
            result = None
            if record.status == "completed" and record.result is not None:
                result = records.decode_result(record.result)
            found.append(record)
            operations.append(
                ToolOperation(
                    operation_id=record.operation_id,
                    sent=record.status in ("sent", "completed", "unknown"),
                    result=result,
                )
            )
        if not operations:
            return Resume(turn_id=turn_id), ()
        resume = Resume(turn_id=turn_id, operation=operations[0], operations=tuple(operations))
        return resume, tuple(found)
