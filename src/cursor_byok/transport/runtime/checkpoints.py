"""Conversation checkpoints: the turns published to the client and their blobs.

The turns are the loop's turn marks (`ConversationState.turn_starts`, derived.turn_ends): one
per turn of the active branch, across compaction epochs. Each turn's blob names its closed view
(cursor/checkpoint.py `turn_blob`), so its id is a function of the committed state: a later run
whose checkpoint lists a strict prefix of them went back to the end of the last turn it lists,
and the loop gets `Rewind(turns=k)`. A checkpoint goes out after each model call that changed
the history (the loop's `Transition.checkpoint`, with the calls still unanswered) and at the
end of each turn; its meter is the one of the state's last model call (`meter_basis`), no pass
over the history. The marks the client was told at the end of a turn are also saved to the
store (a record of what was published); nothing reads them back to decide.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ...loop import ConversationState, Span
from ...loop import view as views
from ...loop.derived import plans_in_view, turn_ends
from ...loop.meter import meter_of_state
from ...store.api import Store, TurnMark
from ..connect.channel import RunChannel
from ..cursor import checkpoint as checkpoint_frame
from ..cursor import rewound_to, turn_blob
from . import records
from .committed_states import CommittedStates
from .requests import Answer, ClientRequests
from .summaries import summary_records

# How long a turn waits for the client to store its checkpoint blob (a client that keeps no
# blobs gets no checkpoint; the turn still ends well).
BLOB_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class PendingBlob:
    """The end-of-turn checkpoint blob sent to the client, its acknowledgement still to come."""

    ids: list[bytes]  # every turn's blob id, this one's last
    ends: tuple[tuple[Span, ...], ...]
    kv_id: int
    reply: asyncio.Future[Answer] | None  # None: no turn to store (a state from before marks)


class Checkpoints:
    def __init__(
        self,
        *,
        conversation_id: str,
        store: Store,
        states: CommittedStates,
        requests: ClientRequests,
        channel: RunChannel,
        background: Callable[[Awaitable[None], str], None],
        window: int,
    ) -> None:
        self.conversation_id = conversation_id
        self.window = window  # the configured window: the meter's for a state without a budget
        self.store = store
        self.states = states
        self.requests = requests
        self.channel = channel
        self._background = background
        self._saved: list[TurnMark] | None = None  # the store's marks; None: not read yet
        # Each turn's blob and id by its end view: a turn's id is computed once per run.
        self._blobs: dict[tuple[str, int, tuple[Span, ...]], tuple[bytes, bytes]] = {}
        # The client's helper fields of its last checkpoint: published back unchanged.
        self.carried = b""

    def new_conversation(self) -> None:
        """A conversation new to this server has no turns saved yet."""
        self._saved = []

    def _blob(self, conversation: str, turn: int, end: tuple[Span, ...]) -> tuple[bytes, bytes]:
        """(blob, id) of turn `turn` (1-based) of `conversation` ending with the closed view
        `end`."""
        key = (conversation, turn, end)
        found = self._blobs.get(key)
        if found is None:
            spans = [(s.start, s.end if s.end is not None else s.start) for s in end]
            blob = turn_blob(conversation, turn, spans)
            found = (blob, hashlib.sha256(blob).digest())
            self._blobs[key] = found
        return found

    def published(self, state: ConversationState) -> tuple[list[bytes], bytes]:
        """Every turn's blob id, in order, and the last turn's blob (b"" with no turns). A
        turn made in another conversation (a fork's first turns) has that one's blob."""
        ends = turn_ends(state)
        ids: list[bytes] = []
        blob = b""
        for k, (mark, end) in enumerate(zip(state.turn_starts, ends, strict=True), start=1):
            blob, digest = self._blob(mark.conversation or self.conversation_id, k, end)
            ids.append(digest)
        return ids, blob

    # -- a later run's checkpoint -------------------------------------------------------------

    def rewind_target(
        self, client_turns: tuple[bytes, ...], state: ConversationState
    ) -> int | None:
        """How many of our turns the client's checkpoint keeps, when it is behind ours: a
        strict prefix of the turns we publish (anything else, a foreign list included, is not
        a rewind)."""
        if not client_turns:
            return None
        return rewound_to(client_turns, self.published(state)[0])

    # -- during a turn --------------------------------------------------------------------------

    def mid_turn(self, state: ConversationState, pending_tool_calls: Sequence[str]) -> None:
        """A model call changed the history: its blob, then the checkpoint with that call's
        meter and the tool calls still unanswered. Nothing waits for the blob's
        acknowledgement (the client handles its messages in order)."""
        ids, blob = self.published(state)
        if blob:
            self.requests.store_blob(blob)
        self._send(state, ids, pending_tool_calls)

    # -- the end of a turn ----------------------------------------------------------------------

    async def send_blob(self, state: ConversationState, version: int) -> PendingBlob:
        """Send this turn's checkpoint blob; its acknowledgement is awaited by `publish`. Sent
        before the turn's last commit, so the client's round trip overlaps the commit. The
        marks the store holds are read first (once per run), so the turn's own are written at
        once when it is published."""
        await self._saved_marks(version)
        ids, blob = self.published(state)
        if not blob:
            return PendingBlob(ids, (), 0, None)
        kv_id, reply = self.requests.store_blob(blob)
        return PendingBlob(ids, turn_ends(state), kv_id, reply)

    def drop(self, pending: PendingBlob) -> None:
        if pending.reply is not None:
            self.requests.forget(pending.kv_id, pending.reply)

    async def publish(self, pending: PendingBlob, state: ConversationState, version: int) -> None:
        """Tell the client where the conversation stands, once it stored the turn's blob."""
        if pending.reply is not None and not await self.requests.stored(
            pending.kv_id, pending.reply, BLOB_TIMEOUT_S
        ):
            return
        self._send(state, pending.ids, ())
        marks = [
            TurnMark(
                conversation_id=self.conversation_id,
                turn=k,
                blob_id=digest,
                message_count=views.length(end, 0),  # closed spans: the length is theirs
                view=records.encode_view(end),
            )
            for k, (digest, end) in enumerate(zip(pending.ids, pending.ends, strict=True), 1)
        ]
        saved = await self._saved_marks(version)
        unchanged = 0
        for old, new in zip(saved, marks, strict=False):
            if old.blob_id != new.blob_id or old.turn != new.turn:
                break
            unchanged += 1
        if unchanged == len(marks) == len(saved):
            return
        self._saved = marks
        self.states.set_turn_marks(self.conversation_id, version, marks)
        # The turn ends without waiting for the write: the marks only record what was
        # published (the next run's turns come from the loop's state).
        self._background(
            self.store.save_turn_marks(self.conversation_id, marks, unchanged=unchanged),
            "turn marks",
        )

    async def _saved_marks(self, version: int) -> list[TurnMark]:
        if self._saved is None:
            marks = self.states.turn_marks(self.conversation_id, version)
            if marks is None:
                marks = list(await self.store.list_turn_marks(self.conversation_id))
                self.states.set_turn_marks(self.conversation_id, version, marks)
            self._saved = marks
        return list(self._saved)

    def _send(
        self, state: ConversationState, ids: list[bytes], pending_tool_calls: Sequence[str]
    ) -> None:
        mode = state.context.mode if state.context is not None else None
        self.channel.send(
            checkpoint_frame(
                ids,
                state.todos,
                mode,
                # The meter of the state's last model call (O(1)), so a restarted server's
                # next checkpoint carries it too.
                meter=meter_of_state(state, self.window),
                plan=state.plan,
                plans=plans_in_view(state, state.view),
                summaries=summary_records(state),
                carried=self.carried,
                pending_tool_calls=pending_tool_calls,
            )
        )
