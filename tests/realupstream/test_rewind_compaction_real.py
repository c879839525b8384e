"""Rewind past a compaction with real parts: our client over the HTTP/1.1 shim -> our server ->
llama-server with a real model, on a window small enough that the conversation is compacted
after a few turns. The client keeps every checkpoint as the IDE does; going back to turn 2
(before the compaction) makes the next request that epoch's history, unsummarized, extending
turn 2's request byte for byte (the bytes the server stored and sent to llama-server), and the
turn list carries on from the two kept turns."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from cursor_byok.transport.cursor.proto import agent_pb2
from cursor_byok.transport.runtime.stored_request import load_request
from tests.e2e.test_shim import Reader, ShimRun, http, run_request
from tests.realupstream.conftest import LlamaServer
from tests.support.live import ServerProcess, server_process

# The agent's fixed part (our system prompt and tools) is about 4,300 real tokens; the window
# leaves room for a few turns of ~250 tokens before the threshold.
WINDOW = 6_000
PADDING = "the sea is salty and deep, with tides that follow the moon; " * 16


def config(llama: LlamaServer, db: Path) -> str:
    return f"""
[server]
database = "{db}"

[providers.llama]
api = "openai-chat"
base_url = "{llama.v1_url}"

[models.local]
provider = "llama"
model = "{llama.model}"
context_window = {WINDOW}
max_output_tokens = 32
temperature = 0
"""


async def turn(server: ServerProcess, message: agent_pb2.AgentClientMessage) -> Reader:
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(message)
            end = await reader.wait_end(240)
    assert end == {}, (end, reader.kinds)
    return reader


def checkpoint_of(reader: Reader) -> agent_pb2.ConversationStateStructure:
    states = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.HasField("conversation_checkpoint_update")
    ]
    assert states, reader.kinds
    return states[-1]


def request_of(
    prompt: str, conversation: str, state: agent_pb2.ConversationStateStructure | None
) -> agent_pb2.AgentClientMessage:
    message = run_request(prompt, conversation, model="local")
    if state is not None:
        message.run_request.conversation_state.CopyFrom(state)
    return message


async def stored_bodies(db: Path, conversation: str) -> list[bytes]:
    """The exact body of every model call of the conversation (not the summaries), in order."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT call_id, request, request_hash FROM llm_calls WHERE conversation_id = ? "
            "ORDER BY created_at_ms, call_id",
            (conversation,),
        ).fetchall()
    stored = {str(r[0]): bytes(r[1]) for r in rows}

    async def fetch(call_id: str) -> bytes | None:
        return stored.get(call_id)

    out: list[bytes] = []
    for call_id, data, request_hash in rows:
        if ":summary" in str(call_id):
            continue
        out.append((await load_request(bytes(data), str(request_hash), fetch)).body)
    return out


def messages_bytes(body: bytes) -> bytes:
    text = body.decode()
    start = text.index('"messages":') + len('"messages":')
    _, end = json.JSONDecoder().raw_decode(text, start)
    return text[start:end].encode()


async def test_a_rewind_to_before_a_real_compaction_restores_that_epoch(
    llama_server_8k: LlamaServer, tmp_path: Path
) -> None:
    db = tmp_path / "db"
    conversation = str(uuid.uuid4())
    with server_process(config(llama_server_8k, db), tmp_path) as server:
        checkpoints: list[agent_pb2.ConversationStateStructure] = []
        compacted_at: int | None = None
        for n in range(8):
            state = checkpoints[-1] if checkpoints else None
            prompt = f"Note {n}: {PADDING} Answer in one short sentence."
            reader = await turn(server, request_of(prompt, conversation, state))
            checkpoints.append(checkpoint_of(reader))
            if "interaction_update.summary_started" in reader.kinds:
                compacted_at = n
                break
        assert compacted_at is not None and compacted_at >= 2, server.log()
        assert checkpoints[-1].self_summary_count == 1
        assert [len(c.turns) for c in checkpoints] == list(range(1, compacted_at + 2))
        before = await stored_bodies(db, conversation)

        # Back to the end of turn 2, before the compaction.
        again = "Note 1, again: what is the sea like? Answer in one short sentence."
        back = await turn(server, request_of(again, conversation, checkpoints[1]))
        assert "interaction_update.summary_started" not in back.kinds
        after = await stored_bodies(db, conversation)
        log = server.log()
    assert len(after) == len(before) + 1, log
    sent = after[-1]
    said = [m["content"] for m in json.loads(sent)["messages"] if m["role"] == "user"]
    assert len(said) == 3 and said[0].startswith("Note 0:") and said[1].startswith("Note 1:")
    assert said[2] == again
    # Turn 2's request (the second model call), extended byte for byte.
    assert messages_bytes(sent).startswith(messages_bytes(before[1])[:-1])
    state = checkpoint_of(back)
    assert list(state.turns[:2]) == list(checkpoints[1].turns) and len(state.turns) == 3
    assert state.self_summary_count == 0
    summarized = {c.id: c.estimated_tokens for c in state.token_details.breakdown.categories}
    assert summarized["summarized_conversation"] == 0
    assert 0 < state.token_details.used_tokens <= WINDOW
