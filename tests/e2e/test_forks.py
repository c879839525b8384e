"""Issue 24 §3: a chat forked in the IDE starts with its source's history, end to end over
HTTP/2 `Run` (the real server process, the scripted brain upstream, our client as the IDE):

- a new conversation id whose checkpoint lists the source's turn blobs (all of them, or the
  first turns only: a fork from an earlier message);
- NotifyConversationClone, then the clone's first run with an empty checkpoint;
- history that arrives only in `pre_fetched_blobs` (the client answers no get_blob).

Each fork has its own log: the source and the fork go on without seeing each other's turns.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_modes_actions import last_checkpoint, moded_request
from tests.e2e.test_shim import Reader, chat_requests, unique
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work: Path = tmp_path_factory.mktemp("forks")
    with server_process(brain_config(upstream.base_url, db=work / "byok.db"), work) as srv:
        yield srv


class Client:
    """The IDE's side over HTTP/2: it keeps every blob the server stores, as the IDE does,
    and serves them back (or none, with `serve_blobs=False`)."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.blobs: dict[bytes, bytes] = {}

    async def run(
        self, message: agent_pb2.AgentClientMessage, *, serve_blobs: bool = True
    ) -> Reader:
        client = await cc.H2Client.connect("127.0.0.1", self.server.port)
        try:
            stream = await client.open_run()
            blobs = self.blobs if serve_blobs else {}
            reader = Reader(stream, stream.send, blobs=blobs)
            try:
                await stream.send(message)
                assert await reader.wait_end() == {}
            finally:
                await reader.close()
            if not serve_blobs:
                self.blobs.update(reader.blobs)
            return reader
        finally:
            await client.close()


def _messages(upstream: FakeUpstream, marker: str) -> list[dict[str, Any]]:
    (body,) = chat_requests(upstream, marker)
    return [m for m in body["messages"] if m["role"] != "system"]


async def _source(client: Client, upstream: FakeUpstream) -> tuple[str, list[str], list[Any]]:
    """A two-turn conversation of this server: (id, its two prompts, its checkpoints)."""
    cid = str(uuid.uuid4())
    prompts = [unique("source one"), unique("source two")]
    checkpoints: list[Any] = []
    state = None
    for prompt in prompts:
        reader = await client.run(moded_request(prompt, "agent", cid, state=state))
        state = last_checkpoint(reader)
        checkpoints.append(state)
    assert len(checkpoints[-1].turns) == 2
    return cid, prompts, checkpoints


async def test_a_fork_with_the_sources_turn_blobs_starts_with_its_history(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    client = Client(server)
    source, prompts, checkpoints = await _source(client, upstream)
    source_history = _messages(upstream, prompts[1])
    fork = str(uuid.uuid4())
    asked = unique("fork question")
    reader = await client.run(moded_request(asked, "agent", fork, state=checkpoints[-1]))
    forked = _messages(upstream, asked)
    # The source's request of turn 2, its answer, then the fork's own message.
    assert forked[: len(source_history)] == source_history
    assert forked[len(source_history)]["role"] == "assistant"
    assert asked in json.dumps(forked[-1]) and len(forked) == len(source_history) + 2
    # Its own log: its next turn extends it, and the source's next turn never sees it.
    again = unique("fork again")
    await client.run(moded_request(again, "agent", fork, state=last_checkpoint(reader)))
    assert _messages(upstream, again)[: len(forked)] == forked
    later = unique("source three")
    await client.run(moded_request(later, "agent", source, state=checkpoints[-1]))
    source_next = json.dumps(_messages(upstream, later))
    assert asked not in source_next and again not in source_next


async def test_a_fork_from_an_earlier_turn_holds_that_turns_history_only(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    client = Client(server)
    _source_id, prompts, checkpoints = await _source(client, upstream)
    fork = str(uuid.uuid4())
    asked = unique("fork after turn one")
    await client.run(moded_request(asked, "agent", fork, state=checkpoints[0]))
    forked = json.dumps(_messages(upstream, asked))
    assert prompts[0] in forked and prompts[1] not in forked


async def test_notify_conversation_clone_then_an_empty_checkpoint(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    client = Client(server)
    source, prompts, _ = await _source(client, upstream)
    clone = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=server.url) as http:
        answer = await cc.unary(
            http,
            "/agent.v1.AgentService/NotifyConversationClone",
            agent_pb2.NotifyConversationCloneRequest(
                conversation_id=clone, source_conversation_id=source, source_request_id="r1"
            ),
            agent_pb2.NotifyConversationCloneResponse,
        )
    assert answer == agent_pb2.NotifyConversationCloneResponse()
    asked = unique("clone question")
    await client.run(moded_request(asked, "agent", clone))
    forked = json.dumps(_messages(upstream, asked))
    assert prompts[0] in forked and prompts[1] in forked


def _blob(message: dict[str, str]) -> tuple[bytes, bytes]:
    data = json.dumps(message).encode()
    return hashlib.sha256(data).digest(), data


async def test_history_only_in_pre_fetched_blobs_reaches_the_model(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """A conversation new to this server whose root prompt messages come only as
    pre_fetched_blobs (field 17): the client serves no get_blob, the model still reads them."""
    earlier = unique("what the client remembers")
    user_id, user_blob = _blob({"role": "user", "content": earlier})
    asst_id, asst_blob = _blob({"role": "assistant", "content": "noted"})
    state = agent_pb2.ConversationStateStructure()
    state.root_prompt_messages_json.extend([user_id, asst_id])
    asked = unique("and now")
    message = moded_request(asked, "agent", str(uuid.uuid4()), state=state)
    for blob_id, data in ((user_id, user_blob), (asst_id, asst_blob)):
        message.run_request.pre_fetched_blobs.add(id=blob_id, value=data)
    bad = message.run_request.pre_fetched_blobs.add(id=b"\x00" * 32, value=b"not that blob")
    assert bad.id
    reader = await Client(server).run(message, serve_blobs=False)
    assert reader.get_blob_ids == []  # nothing asked of the client
    forked = _messages(upstream, asked)
    assert [m["role"] for m in forked] == ["user", "assistant", "user"]
    assert earlier in json.dumps(forked[0])


def _sent(upstream: FakeUpstream, marker: str) -> bytes:
    """The raw bytes of the one chat request upstream received whose last message says
    `marker` (the one that asked it)."""
    (found,) = [
        r.body
        for r in list(upstream.requests)
        if r.path.endswith("/chat/completions")
        and marker in json.dumps(json.loads(r.body)["messages"][-1])
    ]
    return found


async def test_a_rewind_inside_a_fork_to_a_turn_before_the_fork_point(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """The fork's checkpoint lists the source's turns first (the blobs the IDE holds for
    them), then its own: a rewind inside the fork to the source's turn 1, by the checkpoint
    the IDE kept for it, restores turn 1's history, and the model's next request extends the
    source's request of turn 2 byte for byte up to turn 2's message."""
    client = Client(server)
    _source_id, prompts, checkpoints = await _source(client, upstream)
    fork = str(uuid.uuid4())
    asked = unique("fork question")
    reader = await client.run(moded_request(asked, "agent", fork, state=checkpoints[-1]))
    state = last_checkpoint(reader)
    assert len(state.turns) == 3
    assert list(state.turns[:2]) == list(checkpoints[-1].turns)  # the source's own blobs

    # Back to the end of turn 1, inside the fork: the IDE sends the checkpoint of that turn.
    again = unique("fork back at turn one")
    back = await client.run(moded_request(again, "agent", fork, state=checkpoints[0]))
    body = _sent(upstream, again)
    said = [m["content"] for m in json.loads(body)["messages"] if m["role"] == "user"]
    assert [prompts[0] in json.dumps(said[0]), len(said)] == [True, 2]
    assert again in json.dumps(said[1]) and asked not in body.decode()
    # Byte for byte: the source's turn-2 request up to turn 2's own message is this one's
    # up to the new message (the same system prompt, tools and turn 1).
    source_two = _sent(upstream, prompts[1])
    cut = source_two.index(json.dumps(prompts[1])[1:12].encode())
    head = source_two[: source_two.rindex(b"{", 0, cut)]
    assert body.startswith(head), (head[-200:], body[: len(head)][-200:])
    # The fork's checkpoint now: turn 1 (the source's blob), then the new turn.
    rewound = last_checkpoint(back)
    assert len(rewound.turns) == 2 and rewound.turns[0] == checkpoints[0].turns[0]
    # and the fork goes on from there: its next turn extends this request byte for byte.
    more = unique("fork after the rewind")
    await client.run(moded_request(more, "agent", fork, state=rewound))
    nxt = _sent(upstream, more)
    assert nxt.startswith(body[: body.rindex(b"{", 0, body.index(again.encode()))])
