"""Conversation checkpoints: the turns published to the client (turn marks) and their blobs.

After each turn the client stores one blob per turn and gets a checkpoint listing them; a
later run's checkpoint that lists a strict prefix of those turns means the user went back to
the end of the last turn it lists, and the loop gets a `Rewind` to that turn's view. Marks are
kept with the conversation's committed state while it is current (committed_states.py), else
read from the store; only the run that holds the conversation writes them.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ...llm import canonical
from ...loop import ConversationState, Span
from ...loop import view as views
from ...loop.derived import plans_in_view
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
    """A checkpoint blob sent to the client, its acknowledgement still to come."""

    marks: list[TurnMark]
    blob: bytes
    kv_id: int
    reply: asyncio.Future[Answer]


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
        self.window = window  # the model's context window: the meter's max_tokens
        self.store = store
        self.states = states
        self.requests = requests
        self.channel = channel
        self._background = background
        self._marks: list[TurnMark] | None = None  # None: not read yet
        # The client's helper fields of its last checkpoint: published back unchanged.
        self.carried = b""

    def new_conversation(self) -> None:
        """A conversation new to this server has no turns published yet."""
        self._marks = []

    async def marks(self, version: int) -> list[TurnMark]:
        if self._marks is None:
            marks = self.states.turn_marks(self.conversation_id, version)
            if marks is None:
                marks = list(await self.store.list_turn_marks(self.conversation_id))
                self.states.set_turn_marks(self.conversation_id, version, marks)
            self._marks = marks
        return list(self._marks)

    # -- a later run's checkpoint -------------------------------------------------------------

    async def rewind_target(
        self, client_turns: tuple[bytes, ...], version: int
    ) -> tuple[int, tuple[Span, ...]] | None:
        """(turn, its view) when the client's checkpoint is behind the published turns."""
        if not client_turns:
            return None
        marks = await self.marks(version)
        k = rewound_to(client_turns, [m.blob_id for m in marks])
        if k is None:
            return None
        mark = marks[k - 1]
        return k, records.decode_view(mark.view, mark.message_count)

    def rewound(self, turns: int, version: int) -> None:
        """The rewind to `turns` is committed: the later marks go."""
        marks = (self._marks or [])[:turns]
        self._marks = marks
        self.states.set_turn_marks(self.conversation_id, version, marks)
        self._background(
            self.store.save_turn_marks(self.conversation_id, marks, unchanged=len(marks)),
            "turn marks",
        )

    # -- the end of a turn ----------------------------------------------------------------------

    async def send_blob(self, state: ConversationState, version: int) -> PendingBlob:
        """Send this turn's checkpoint blob; its acknowledgement is awaited by `publish`. Sent
        before the turn's last commit, so the client's round trip overlaps the commit."""
        current = views.closed(state.view, len(state.log))
        marks = kept_marks(await self.marks(version), current)
        blob = turn_blob(
            self.conversation_id,
            len(marks) + 1,
            len(state.messages),
            canonical.messages_hash(state.messages),
        )
        kv_id, reply = self.requests.store_blob(blob)
        return PendingBlob(marks, blob, kv_id, reply)

    def drop(self, pending: PendingBlob) -> None:
        self.requests.forget(pending.kv_id, pending.reply)

    async def publish(self, pending: PendingBlob, state: ConversationState, version: int) -> None:
        """Tell the client where the conversation stands, once it stored the turn's blob."""
        if not await self.requests.stored(pending.kv_id, pending.reply, BLOB_TIMEOUT_S):
            return
        marks = pending.marks
        marks.append(
            TurnMark(
                conversation_id=self.conversation_id,
                turn=len(marks) + 1,
                blob_id=hashlib.sha256(pending.blob).digest(),
                message_count=len(state.messages),
                view=records.encode_view(views.closed(state.view, len(state.log))),
            )
        )
        # Published before the marks are stored, and the turn ends without waiting for them:
        # should the write be lost, the next run's turns are simply not a prefix of ours and
        # our history stands (never a wrong rewind).
        mode = state.context.mode if state.context is not None else None
        # The context meter moves on each checkpoint: the last measured call of the active
        # history (loop/meter.py), so a restarted server's next checkpoint carries it too.
        meter = meter_of_state(state, self.window)
        self.channel.send(
            checkpoint_frame(
                [m.blob_id for m in marks],
                state.todos,
                mode,
                meter=meter,
                plan=state.plan,
                plans=plans_in_view(state, state.view),
                summaries=summary_records(state),
                carried=self.carried,
            )
        )
        self._marks = list(marks)
        self.states.set_turn_marks(self.conversation_id, version, marks)
        # The marks before this turn's are what the store holds (read from it, or written by
        # an earlier turn: a lost write makes the store rewrite them all).
        self._background(
            self.store.save_turn_marks(self.conversation_id, marks, unchanged=len(marks) - 1),
            "turn marks",
        )


def kept_marks(marks: list[TurnMark], current: tuple[Span, ...]) -> list[TurnMark]:
    """The turn marks whose turn is on the branch of the history `current` (a closed view)
    selects: those whose view is a prefix of it.

    Each list of marks is a chain: `publish` appends a turn's mark to the marks this filter
    kept (each a prefix of that turn's view), and a rewind keeps a head of the list, so every
    mark's view is a prefix of the last one's. When the last is a prefix of `current`, so are
    all (O(1) instead of decoding every turn's view each turn, issue 28); otherwise (a rewind
    or a compaction moved the branch) each is checked."""
    if not marks:
        return []
    last = marks[-1]
    if views.is_prefix(records.decode_view(last.view, last.message_count), current):
        return list(marks)
    return [
        m for m in marks if views.is_prefix(records.decode_view(m.view, m.message_count), current)
    ]
