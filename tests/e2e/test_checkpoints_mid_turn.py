"""Checkpoints during a long agent turn, against the REAL server process over the HTTP/1.1 shim
and HTTP/2 `Run`: after each model call that changed the history the client gets a checkpoint
(its blob first) with that call's meter and the tool calls still unanswered, as Cursor's own
backend sends them; the turn ends set_blob → turn_ended → checkpoint → end of stream. The
scripted brain (`brain-small`) reports each request's size as its prompt tokens, so each
checkpoint's meter can be matched to the call it was computed for."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_compaction import SMALL, SMALL_MODEL, bodies_of
from tests.e2e.test_modes_actions import TRANSPORTS, open_run
from tests.e2e.test_shim import exec_of, kind, read_ok, run_request
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("server")
    config = brain_config(upstream.base_url, db=work / "byok.db") + SMALL_MODEL
    with server_process(config, work) as srv:
        yield srv


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_checkpoint_follows_each_model_call_with_its_own_meter(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    conversation = str(uuid.uuid4())
    since = len(upstream.requests)
    message = run_request(f"[reads 3 /w/a.txt] {conversation}", conversation, model=SMALL)
    async with open_run(server, transport) as (send, reader):
        await send(message)
        answered: set[int] = set()
        is_read = exec_of("read_args")

        def unanswered(m: agent_pb2.AgentServerMessage) -> bool:
            return is_read(m) and m.exec_server_message.id not in answered

        for _ in range(3):
            found = await reader.wait_for(unanswered)
            ask = found.exec_server_message
            answered.add(ask.id)
            await send(read_ok(ask.id, ask.read_args.path, "x = 1\n"))
        assert await reader.wait_end() == {}, reader.kinds
    calls = bodies_of(upstream, conversation, since)
    assert len(calls) == 4  # three Reads, one call each, then the answer
    checkpoints = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if kind(m) == "conversation_checkpoint_update"
    ]
    assert len(checkpoints) == 4  # one after each of the three tool calls, one at the end
    for n, (state, call) in enumerate(zip(checkpoints, calls, strict=True)):
        # The meter of the call the checkpoint follows: the provider's count of its request.
        assert state.token_details.used_tokens == len(call.body) // 4, n
        assert state.token_details.breakdown.total_used_tokens == len(call.body) // 4
        # One turn, whose blob id moves as the turn goes on (it names the turn's content).
        assert len(state.turns) == 1
        # While a tool runs its call is pending; at the end nothing is.
        assert list(state.pending_tool_calls) == ([f"call_r{n + 1}"] if n < 3 else [])
    assert len({bytes(s.turns[0]) for s in checkpoints}) == 4
    # Each listed blob was stored on the client before the checkpoint naming it.
    kinds = reader.kinds
    for state in checkpoints:
        blob_id = bytes(state.turns[0])
        assert hashlib.sha256(reader.blobs[blob_id]).digest() == blob_id
    # Each mid-turn checkpoint comes before the exec of the tool it lists as pending.
    order = [
        k for k in kinds if k in ("conversation_checkpoint_update", "exec_server_message.read_args")
    ]
    assert order == ["conversation_checkpoint_update", "exec_server_message.read_args"] * 3 + [
        "conversation_checkpoint_update"
    ]
    # The end: set_blob, turn_ended, checkpoint, then the stream ends.
    tail = [
        k
        for k in kinds
        if k.startswith(("kv_server_message", "conversation_checkpoint", "interaction_update.turn"))
    ][-3:]
    assert tail == [
        "kv_server_message.set_blob_args",
        "interaction_update.turn_ended",
        "conversation_checkpoint_update",
    ]
    assert kinds[-1] == "conversation_checkpoint_update"
