"""Conversation checkpoints: what the server tells the client about finished turns, and how a
later run's checkpoint is read back.

After each model call that changed the history, and at the end of each turn, the server
stores one small blob on the client (`set_blob`) describing the turn as it stands and sends a
`conversation_checkpoint_update` listing one blob id per turn (the last one's id changes as its
turn goes on, as Cursor's own do). The client sends that list back in the next run's
`conversation_state.turns`. A list that is a strict prefix of the turns the server publishes
means the user went back to the end of the last turn it lists.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

__all__ = ["read_turn_blob", "rewound_to", "turn_blob"]


def turn_blob(conversation_id: str, turn: int, view: Sequence[tuple[int, int]]) -> bytes:
    """A small, stable description of turn `turn` as it stands: the log positions `[start,
    end)` of the active history at its end (the log is append-only, so these name the turn's
    content exactly, on its branch and in its compaction epoch). Its SHA-256 is the blob id."""
    return msgspec.json.encode(
        {
            "cursor_byok_turn": turn,
            "conversation_id": conversation_id,
            "message_count": sum(end - start for start, end in view),
            "view": [[start, end] for start, end in view],
        },
        order="deterministic",
    )


def rewound_to(client_turns: Sequence[bytes], published: Sequence[bytes]) -> int | None:
    """The number of turns the client went back to, when its checkpoint lists a strict prefix
    of the turns published (at least one); None when it is not behind."""
    k = len(client_turns)
    if k == 0 or k >= len(published):
        return None
    return k if list(client_turns) == list(published[:k]) else None


class _TurnBlob(msgspec.Struct, frozen=True):
    cursor_byok_turn: int
    conversation_id: str


_turn_blob_decoder = msgspec.json.Decoder(_TurnBlob)


def read_turn_blob(data: bytes) -> tuple[str, int] | None:
    """(conversation id, turn) of a turn blob this server wrote; None for any other bytes
    (a blob of Cursor's own backend, or garbage)."""
    try:
        blob = _turn_blob_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not blob.conversation_id or blob.cursor_byok_turn < 1:
        return None
    return blob.conversation_id, blob.cursor_byok_turn
