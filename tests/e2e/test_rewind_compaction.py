"""A rewind to a turn before a compaction, against the REAL server process over the HTTP/1.1
shim and HTTP/2 `Run`, with the scripted brain upstream on a model whose window is small (the
brain reports each request's size as its prompt tokens, as a real model would).

The client keeps every checkpoint as the IDE does and sends the last one back with each run
request. After the conversation was compacted, it sends a checkpoint from before the
compaction (the user went back to turn 2): the model's next request is turn 2's history,
unsummarized, extending that epoch's last request byte for byte; the checkpoint lists the
kept turns plus the new one, carries no summary, and its meter describes the restored view."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator

import pytest

from cursor_byok.loop import compaction
from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_compaction import SMALL, SMALL_MODEL, bodies_of, messages_bytes
from tests.e2e.test_modes_actions import TRANSPORTS, last_checkpoint, open_run
from tests.e2e.test_shim import Reader, run_request
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


def request_with(
    prompt: str, conversation: str, state: agent_pb2.ConversationStateStructure | None
) -> agent_pb2.AgentClientMessage:
    message = run_request(prompt, conversation, model=SMALL)
    if state is not None:  # the IDE sends its last checkpoint back with each run request
        message.run_request.conversation_state.CopyFrom(state)
    return message


async def turn(
    server: ServerProcess, transport: str, message: agent_pb2.AgentClientMessage
) -> Reader:
    async with open_run(server, transport) as (send, reader):
        await send(message)
        end = await reader.wait_end()
    assert end == {}, (end, reader.kinds)
    return reader


def summarized(body: bytes) -> bool:
    """Whether the request carries our summary (the first message after the system prompt)."""
    return any(
        isinstance(m["content"], str) and m["content"].startswith(compaction.SUMMARY_HEADER)
        for m in json.loads(body)["messages"]
    )


def categories(state: agent_pb2.ConversationStateStructure) -> dict[str, tuple[int, int]]:
    return {
        c.id: (c.estimated_tokens, c.character_count)
        for c in state.token_details.breakdown.categories
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_rewind_to_before_a_compaction_restores_that_epoch(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    conversation = str(uuid.uuid4())
    tag = uuid.uuid4().hex[:8]
    padding = "lorem ipsum dolor " * 70  # about 300 tokens by the character estimate
    checkpoints: list[agent_pb2.ConversationStateStructure] = []
    last_requests: list[bytes] = []  # each turn's (last) upstream request
    prompts: list[str] = []
    compacted_at: int | None = None
    for n in range(12):
        since = len(upstream.requests)
        prompt = f"turn {n} of {tag} {conversation} {padding}"
        prompts.append(prompt)
        state = checkpoints[-1] if checkpoints else None
        reader = await turn(server, transport, request_with(prompt, conversation, state))
        checkpoints.append(last_checkpoint(reader))
        last_requests.append(bodies_of(upstream, conversation, since)[-1].body)
        if "interaction_update.summary_started" in reader.kinds:
            compacted_at = n
            break
    assert compacted_at is not None and compacted_at >= 2, "the window never filled"
    # The turn list grew by one each turn, across the compaction: its turns are still listed.
    assert [len(c.turns) for c in checkpoints] == list(range(1, compacted_at + 2))
    for earlier, later in itertools.pairwise(checkpoints):
        assert list(later.turns[: len(earlier.turns) - 1]) == list(earlier.turns[:-1])
    assert checkpoints[-1].self_summary_count == 1

    # One more turn in the new epoch.
    since = len(upstream.requests)
    after = await turn(
        server, transport, request_with(f"after {tag}", conversation, checkpoints[-1])
    )
    checkpoints.append(last_checkpoint(after))
    assert summarized(bodies_of(upstream, conversation, since)[-1].body)

    # The user goes back to the end of turn 2 (index 1), before the compaction.
    kept = checkpoints[1]
    since = len(upstream.requests)
    again = f"turn 2 again of {tag} {conversation}"
    back = await turn(server, transport, request_with(again, conversation, kept))
    assert "interaction_update.summary_started" not in back.kinds
    (sent,) = bodies_of(upstream, conversation, since)
    body = json.loads(sent.body)
    said = [m["content"] for m in body["messages"] if m["role"] == "user"]
    # Turn 2's history, unsummarized, then the new message: nothing of the later turns.
    assert said == [prompts[0], prompts[1], again]
    assert not summarized(sent.body)
    # It extends that epoch's last request (turn 2's) byte for byte.
    before_bytes = messages_bytes(last_requests[1])
    assert messages_bytes(sent.body).startswith(before_bytes[:-1])
    assert body["tools"] == json.loads(last_requests[1])["tools"]

    # The checkpoint: the two kept turns, then the new one; no summary in the restored view.
    state = last_checkpoint(back)
    assert list(state.turns[:2]) == list(kept.turns) and len(state.turns) == 3
    assert state.self_summary_count == 0 and not state.summary_archives
    # The meter describes the restored view: the provider's count of this very request,
    # nothing summarized; between turn 2's and the largest before the compaction.
    meter = categories(state)
    assert meter["summarized_conversation"] == (0, 0)
    assert state.token_details.used_tokens > checkpoints[1].token_details.used_tokens
    assert state.token_details.used_tokens < checkpoints[compacted_at - 1].token_details.used_tokens
    # and the next turn goes on from there, as the IDE continues the rewound chat
    since = len(upstream.requests)
    await turn(server, transport, request_with(f"next of {tag}", conversation, state))
    (nxt,) = bodies_of(upstream, conversation, since)
    assert messages_bytes(nxt.body).startswith(messages_bytes(sent.body)[:-1])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_foreign_or_equal_checkpoint_never_rewinds(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """A turn list that is not a strict prefix of ours (another server's, or ours as it is)
    leaves the history as it stands."""
    conversation = str(uuid.uuid4())
    asked: list[str] = []
    state: agent_pb2.ConversationStateStructure | None = None
    for prompt in (f"one {conversation}", f"two {conversation}"):
        state = last_checkpoint(
            await turn(server, transport, request_with(prompt, conversation, state))
        )
        asked.append(prompt)
    assert state is not None and len(state.turns) == 2
    foreign = agent_pb2.ConversationStateStructure()
    foreign.turns.append(b"\x01" * 32)  # shorter than ours, but not ours
    for n, sent_state in enumerate((foreign, None)):
        # the second time: the checkpoint of the turn just ended, ours as it stands
        since = len(upstream.requests)
        prompt = f"q{n} {conversation}"
        reader = await turn(
            server, transport, request_with(prompt, conversation, sent_state or state)
        )
        state = last_checkpoint(reader)
        asked.append(prompt)
        (sent,) = bodies_of(upstream, conversation, since)
        said = [m["content"] for m in json.loads(sent.body)["messages"] if m["role"] == "user"]
        assert said == asked  # every turn so far, nothing rewound
        assert len(state.turns) == len(asked)
