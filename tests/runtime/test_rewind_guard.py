"""A rewind needs the client's checkpoint to be a strict prefix of what this server published
(transport/cursor/checkpoint.py `rewound_to`): a shorter list of other turns (another
conversation's, a forged one) rewinds nothing, and no history leaves the model's view."""

from __future__ import annotations

from pathlib import Path

from cursor_byok.loop import WHOLE_LOG
from cursor_byok.transport.cursor import rewound_to, turn_blob
from cursor_byok.transport.runtime import records
from tests.runtime.harness import Client, open_server, run_request


def test_only_a_strict_prefix_of_the_published_turns_is_a_rewind() -> None:
    published = [turn_blob("c1", n, [(0, 2 * n)]) for n in (1, 2, 3)]
    assert rewound_to(published[:1], published) == 1
    assert rewound_to(published[:2], published) == 2
    assert rewound_to(published, published) is None  # not behind
    assert rewound_to([], published) is None
    foreign = [turn_blob("c2", 1, [(0, 2)])]
    assert rewound_to(foreign, published) is None
    assert rewound_to([published[1]], published) is None  # a turn, but not the first


async def test_a_foreign_checkpoint_rewinds_nothing(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["one", "two", "three"], chunk_size=50)
    blobs: dict[bytes, bytes] = {}
    turns: list[bytes] = []
    for n, text in enumerate(["q1", "q2"], start=1):
        client = Client(f"r{n}")
        client.blobs = blobs
        client.say(run_request("c1", text, turns=turns or None))
        server.start(client)
        assert await client.ended() is None
        turns = list(client.sent[-1].conversation_checkpoint_update.turns)
    assert len(turns) == 2
    foreign = turn_blob("other", 1, [(0, 3)])
    client = Client("r3")
    client.blobs = blobs | {foreign: b""}
    client.say(run_request("c1", "q3", turns=[foreign]))
    server.start(client)
    assert await client.ended() is None
    third = server.llm.calls[2].request.messages
    assert [m.text for m in third] == ["q1", "one", "q2", "two", "q3"]  # type: ignore[union-attr]
    record = await server.store.load("c1")
    assert record is not None
    state = records.decode_state(record.state, record.messages)
    assert state.view == WHOLE_LOG  # type: ignore[attr-defined]
    await server.store.close()
