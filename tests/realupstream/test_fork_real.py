"""Issue 24 §3 with a real model: a conversation answered by llama-server, then a chat forked
from it (a new conversation id with the source's checkpoint, as the IDE forks), over the
HTTP/1.1 shim. The fork's first request to the real model holds the source's turn, and the
real model answers it."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from cursor_byok.transport.cursor.proto import agent_pb2
from cursor_byok.transport.runtime.stored_request import decode_whole
from tests.e2e.test_shim import ShimRun, http, run_request
from tests.realupstream.conftest import LlamaServer
from tests.realupstream.test_compaction_real import config
from tests.support.live import ServerProcess, server_process


async def _turn(
    server: ServerProcess,
    text: str,
    cid: str,
    state: agent_pb2.ConversationStateStructure | None,
    blobs: dict[bytes, bytes],
) -> agent_pb2.ConversationStateStructure:
    message = run_request(text, cid, model="local")
    if state is not None:
        message.run_request.conversation_state.CopyFrom(state)
    async with http(server) as client:
        run = ShimRun(client)
        run.blobs = blobs  # the IDE keeps the blobs the server stores, and serves them back
        async with run.subscribe() as reader:
            await run.send(message)
            end = await reader.wait_end(200)
    assert end == {} and reader.turn_ended, (end, reader.kinds)
    assert "".join(reader.texts).strip(), "the real model said nothing"
    (checkpoint,) = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.HasField("conversation_checkpoint_update")
    ][-1:]
    return checkpoint


def _first_request(db: Path, cid: str) -> dict[str, object]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (row,) = conn.execute(
            "SELECT request FROM llm_calls WHERE conversation_id = ? ORDER BY created_at_ms "
            "LIMIT 1",
            (cid,),
        ).fetchall()
    body: dict[str, object] = json.loads(decode_whole(bytes(row[0])).body)
    return body


async def test_a_fork_of_a_real_conversation_starts_with_its_turns(
    llama_server_8k: LlamaServer, tmp_path: Path
) -> None:
    db = tmp_path / "db"
    with server_process(config(llama_server_8k, db, 8192), tmp_path) as srv:
        blobs: dict[bytes, bytes] = {}
        source = str(uuid.uuid4())
        said = f"Say hello to Bob {uuid.uuid4().hex[:6]}."
        checkpoint = await _turn(srv, said, source, None, blobs)
        fork = str(uuid.uuid4())
        await _turn(srv, "Now say goodbye to him.", fork, checkpoint, blobs)
    body = _first_request(db, fork)
    messages = body["messages"]
    assert isinstance(messages, list)
    roles = [m["role"] for m in messages if m["role"] != "system"]
    assert roles == ["user", "assistant", "user"], roles
    assert said in json.dumps(messages[1]) and "goodbye" in json.dumps(messages[-1])
