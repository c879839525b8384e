"""A conversation stored before the loop kept its own turn marks (`ConversationState.turn_starts`)
gets them back from the store's `turn_marks` rows on its next run, so a rewind to one of its
old turns works: through the production runtime on a real SQLite file that a three-turn
conversation left, rewritten to the previous shape (the state without `turn_starts` and
`meter_basis`, the marks' blob ids in the previous blob format), as a server of that time would
have left it."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import msgspec

from cursor_byok.llm import canonical
from cursor_byok.loop import ConversationState, Span, TurnStart
from cursor_byok.loop import view as views
from cursor_byok.transport.runtime import records
from tests.runtime.harness import Client, open_server, run_request


def previous_blob(conversation_id: str, turn: int, message_count: int, digest: str) -> bytes:
    """A turn blob as the server wrote them before the loop's marks (message count and hash)."""
    return msgspec.json.encode(
        {
            "cursor_byok_turn": turn,
            "conversation_id": conversation_id,
            "message_count": message_count,
            "messages_hash": digest,
        },
        order="deterministic",
    )


def to_previous_shape(db: Path, conversation_id: str) -> list[bytes]:
    """Rewrite the conversation as the previous state shape left it; the client's turn ids."""
    conn = sqlite3.connect(db)
    try:
        (state_blob,) = conn.execute(
            "SELECT state FROM conversations WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
        state = msgspec.json.decode(state_blob, type=ConversationState)
        old = msgspec.structs.replace(state, turn_starts=(), meter_basis=None)
        encoded = records.encode_state(old)
        assert b"turn_starts" not in encoded and b"meter_basis" not in encoded
        conn.execute(
            "UPDATE conversations SET state = ? WHERE conversation_id = ?",
            (encoded, conversation_id),
        )
        log = tuple(
            canonical.decode_message(bytes(body))
            for (body,) in conn.execute(
                "SELECT body FROM messages WHERE conversation_id = ? ORDER BY seq",
                (conversation_id,),
            )
        )
        ids: list[bytes] = []
        marks = conn.execute(
            "SELECT turn, message_count, view FROM turn_marks WHERE conversation_id = ? "
            "ORDER BY turn",
            (conversation_id,),
        ).fetchall()
        for turn, count, view in marks:
            messages = views.materialize(records.decode_view(view, count), log)
            blob = previous_blob(conversation_id, turn, count, canonical.messages_hash(messages))
            digest = hashlib.sha256(blob).digest()
            conn.execute(
                "UPDATE turn_marks SET blob_id = ? WHERE conversation_id = ? AND turn = ?",
                (digest, conversation_id, turn),
            )
            ids.append(digest)
        conn.commit()
        return ids
    finally:
        conn.close()


async def test_a_conversation_stored_before_the_marks_rewinds_to_its_old_turns(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db"
    server = await open_server(db, ["one", "two", "three"], chunk_size=50)
    blobs: dict[bytes, bytes] = {}
    turns: list[bytes] = []
    for n, text in enumerate(["q1", "q2", "q3"], start=1):
        client = Client(f"r{n}")
        client.blobs = blobs
        client.say(run_request("c1", text, turns=turns or None))
        server.start(client)
        assert await client.ended() is None
        turns = list(client.sent[-1].conversation_checkpoint_update.turns)
    await server.store.close()
    old = to_previous_shape(db, "c1")  # what the IDE's checkpoints of the three turns list
    assert len(old) == 3

    # A new process; the IDE goes back to the end of turn 1 with the checkpoint it kept then.
    server = await open_server(db, ["again", "on"], chunk_size=50)
    client = Client("r4")
    client.blobs = blobs
    client.say(run_request("c1", "q2 again", turns=old[:1]))
    server.start(client)
    assert await client.ended() is None
    (call,) = server.llm.calls
    assert [m.text for m in call.request.messages] == ["q1", "one", "q2 again"]  # type: ignore[union-attr]
    record = await server.store.load("c1")
    assert record is not None
    state = records.decode_state(record.state, record.messages)
    # The rebuilt marks: turn 1 (from the store's first mark), then the new turn.
    assert state.turn_starts == (TurnStart(view=()), TurnStart(view=(Span(0, 2),)))
    # The checkpoint keeps the id the IDE holds for turn 1, then the new turn's own.
    listed = list(client.sent[-1].conversation_checkpoint_update.turns)
    assert len(listed) == 2 and listed[0] == old[0] and listed[1] not in old

    # And the conversation goes on from there, its turns as the loop keeps them now.
    client = Client("r5")
    client.blobs = blobs
    client.say(run_request("c1", "on", turns=listed))
    server.start(client)
    assert await client.ended() is None
    second = server.llm.calls[1].request.messages
    assert [m.text for m in second] == ["q1", "one", "q2 again", "again", "on"]  # type: ignore[union-attr]
    await server.store.close()
