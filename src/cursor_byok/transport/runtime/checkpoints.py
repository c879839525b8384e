"""Conversation checkpoints: the turns published to the client and their blobs.

The turns are the loop's turn marks (`ConversationState.turn_starts`, derived.turn_ends): one
per turn of the active branch, across compaction epochs. Each turn's blob names its closed view
(cursor/checkpoint.py `turn_blob`), so its id is a function of the committed state: a later run
whose checkpoint lists a strict prefix of them went back to the end of the last turn it lists,
and the loop gets `Rewind(turns=k)`. A checkpoint goes out after each model call that changed
the history (the loop's `Transition.checkpoint`, with the calls still unanswered) and at the
end of each turn; its meter is the one of the state's last model call (`meter_basis`), no pass
over the history. The marks of the checkpoint that ends a turn are also saved to the store
(a record of what is published), in the transaction that commits the turn's answer (one commit
instead of a write of their own after it; `publish` writes them alone only for a turn that
ended without a commit). They are read back for two things, none a decision: a
turn whose end is the one recorded keeps the id it was published with (an earlier blob
format), and a state stored before the loop kept its marks hands them to the loop
(`TurnMarksFound`), which rebuilds its marks from them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ...loop import ConversationState, Span, TurnMarksFound, wants_turn_marks
from ...loop import view as views
from ...loop.derived import plans_in_view
from ...loop.meter import meter_of_state
from ...store.api import Store, TurnMark
from ..connect.channel import RunChannel
from ..cursor import checkpoint as checkpoint_frame
from ..cursor import rewound_to
from . import records
from .committed_states import CommittedStates
from .requests import Answer, ClientRequests
from .summaries import summary_records
from .turn_ids import TurnIds, turn_ids, turns_of

# How long a turn waits for the client to store its checkpoint blob (a client that keeps no
# blobs gets no checkpoint; the turn still ends well).
BLOB_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class MarksWrite:
    """The conversation's turn marks as the end of a turn leaves them: the saved ones the
    store keeps (the first `unchanged`), then the new ones, and all of them decoded by turn."""

    marks: list[TurnMark]
    unchanged: int
    recorded: dict[int, tuple[tuple[Span, ...], bytes]]


@dataclass(frozen=True, slots=True)
class PendingBlob:
    """The end-of-turn checkpoint blob sent to the client, its acknowledgement still to come."""

    ids: list[bytes]  # every turn's blob id, this one's last
    ends: tuple[tuple[Span, ...], ...]
    kv_id: int
    reply: asyncio.Future[Answer] | None  # None: no turn to store (a state from before marks)
    marks: MarksWrite | None = None  # the marks to save (None: the saved ones are these)


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
        self._turn_ids: TurnIds | None = None
        # The store's marks by turn: (end view, the blob id it was published with).
        self._recorded: dict[int, tuple[tuple[Span, ...], bytes]] | None = None
        # Those of `_recorded` whose id is not the one computed for their turn (ids of an
        # earlier blob format), found once per run: the only ones `published` checks.
        self._legacy: dict[int, tuple[tuple[Span, ...], bytes]] | None = None
        # The client's helper fields of its last checkpoint: published back unchanged.
        self.carried = b""
        self._committed: MarksWrite | None = None  # marks saved with the turn's last commit

    def new_conversation(self) -> None:
        """A conversation new to this server has no turns saved yet."""
        self._saved = []

    def published(self, state: ConversationState) -> tuple[list[bytes], bytes]:
        """Every turn's blob id, in order, and the last turn's blob (b"" with no turns, or
        when the last turn keeps an id the client holds already). A turn made in another
        conversation (a fork's first turns) has that one's blob; a turn the store recorded as
        published with the same end keeps the id it was published with (a blob of an earlier
        format, for a conversation stored before the loop's marks: the client's checkpoints
        of those turns name it). The ids of unchanged turns come from the conversation's
        memo (turn_ids.py)."""
        cid = self.conversation_id
        kept = self.states.turn_ids(cid) or self._turn_ids
        starts = state.turn_starts
        now = views.closed(state.view, len(state.log))
        made_in, ends = turns_of(cid, starts, now, kept)  # derived.turn_ends, from the memo
        memo = turn_ids(made_in, ends, kept, starts)
        self._turn_ids = memo  # kept by the run too: the cache may have dropped the entry
        self.states.set_turn_ids(cid, memo)
        ids, blob = list(memo.ids), memo.last_blob
        if self._legacy is None and self._recorded is not None:
            self._legacy = {
                k: found
                for k, found in self._recorded.items()
                if k > len(ids) or found[1] != ids[k - 1]
            }
        for k, (end, digest) in (self._legacy or {}).items():
            if k <= len(ids) and digest != ids[k - 1] and memo.ends[k - 1] == end:
                ids[k - 1] = digest  # published before the marks: the client holds that id
                if k == len(ids):
                    blob = b""
        return ids, blob

    async def marks_found(self, state: ConversationState, version: int) -> TurnMarksFound | None:
        """Read the store's record of the published turns (once per run, before the client's
        checkpoint is compared with ours); for a state stored before the loop kept its marks
        (the loop says which), the input that hands the loop their ends, in turn order."""
        await self._saved_marks(version)
        if not wants_turn_marks(state):
            return None
        recorded = self._recorded or {}
        return TurnMarksFound(ends=tuple(recorded[k][0] for k in sorted(recorded)))

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
        marks the store holds are read first (once per run): the turn's own (`marks`) are
        saved with that commit (`committed`)."""
        saved = await self._saved_marks(version)
        ids, blob = self.published(state)
        ends = self._turn_ids.ends if self._turn_ids is not None else ()  # as published
        marks = self._marks_write(saved, ids, ends)
        if not blob:
            return PendingBlob(ids, ends, 0, None, marks)
        kv_id, reply = self.requests.store_blob(blob)
        return PendingBlob(ids, ends, kv_id, reply, marks)

    def committed(self, marks: MarksWrite, version: int) -> None:
        """The turn's marks were saved with the commit that made `version`."""
        self._committed = marks
        self._remember(marks, version)

    def drop(self, pending: PendingBlob) -> None:
        if pending.reply is not None:
            self.requests.forget(pending.kv_id, pending.reply)

    async def publish(self, pending: PendingBlob, state: ConversationState, version: int) -> None:
        """Tell the client where the conversation stands, once it stored the turn's blob; the
        turn's marks, unless the turn's last commit saved them, are written then."""
        if pending.reply is not None and not await self.requests.stored(
            pending.kv_id, pending.reply, BLOB_TIMEOUT_S
        ):
            return
        self._send(state, pending.ids, ())
        write = pending.marks
        if write is None or write is self._committed:
            return
        self._remember(write, version)
        # The turn ends without waiting for the write: the marks only record what was
        # published (the next run's turns come from the loop's state; their ids, for the
        # turns whose end is the one recorded, from here).
        save = self.store.save_turn_marks
        self._background(
            save(self.conversation_id, write.marks, unchanged=write.unchanged), "turn marks"
        )

    def _marks_write(
        self, saved: list[TurnMark], ids: list[bytes], ends: tuple[tuple[Span, ...], ...]
    ) -> MarksWrite | None:
        """The marks of a checkpoint listing `ids` (turn ends `ends`), None when the saved
        ones are these already."""
        unchanged = 0
        for old, digest in zip(saved, ids, strict=False):
            if old.blob_id != digest or old.turn != unchanged + 1:
                break
            unchanged += 1
        if unchanged == len(ids) == len(saved):
            return None
        # The saved marks the store keeps, then the new ones (only those are written).
        marks = (
            saved[:unchanged]
            + [
                TurnMark(
                    conversation_id=self.conversation_id,
                    turn=k,
                    blob_id=digest,
                    message_count=views.length(end, 0),  # closed spans: the length is theirs
                    view=records.encode_view(end),
                )
                for k, digest, end in zip(
                    range(unchanged + 1, len(ids) + 1),
                    ids[unchanged:],
                    ends[unchanged:],
                    strict=True,
                )
            ]
        )
        prev = self._recorded
        if prev is not None and unchanged == len(saved) == len(prev):
            # The saved marks are turns 1..unchanged, all kept: their entries are the ones
            # recorded for them (the same ids, so the same ends), and only the new marks' are
            # made (not one tuple per turn at each turn's end, issue 28).
            recorded = dict(prev)
            added = zip(marks[unchanged:], ends[unchanged:], strict=True)
            recorded.update((m.turn, (end, m.blob_id)) for m, end in added)
        else:
            recorded = {m.turn: (end, m.blob_id) for m, end in zip(marks, ends, strict=True)}
        return MarksWrite(marks, unchanged, recorded)

    def _remember(self, write: MarksWrite, version: int) -> None:
        """The marks the store holds (or is about to) at `version`."""
        self._saved = write.marks
        self._recorded = write.recorded
        self.states.set_turn_marks(self.conversation_id, version, write.marks, write.recorded)

    async def _saved_marks(self, version: int) -> list[TurnMark]:
        if self._saved is None:
            marks = self.states.turn_marks(self.conversation_id, version)
            if marks is not None and self._recorded is None:
                self._recorded = self.states.recorded(self.conversation_id, version)
            if marks is None:
                marks = list(await self.store.list_turn_marks(self.conversation_id))
                self.states.set_turn_marks(self.conversation_id, version, marks)
            self._saved = marks
        if self._recorded is None:
            self._recorded = {
                m.turn: (records.decode_view(m.view, m.message_count), m.blob_id)
                for m in self._saved
            }
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
