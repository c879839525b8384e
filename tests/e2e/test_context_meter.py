"""The IDE's context meter over real HTTP: every checkpoint carries `token_details` (reference
§5; loop/meter.py). A real server process, the scripted brain upstream reporting chosen usage
(`[usage N C]`), our Connect client over HTTP/2 `Run` and the HTTP/1.1 shim; the server is
killed with SIGKILL between turns and the meter survives it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cursor_byok.loop.meter import LABELS, Category
from cursor_byok.transport.cursor.proto import agent_pb2
from cursor_byok.transport.runtime import records
from tests.e2e.test_crash_recovery import Crashable, db_reader
from tests.e2e.test_modes_actions import (
    TRANSPORTS,
    _action_request,
    last_checkpoint,
    moded_request,
    open_run,
)
from tests.e2e.test_shim import Reader, chat_requests, exec_of, read_ok, unique
from tests.support.live import ServerProcess, ThreadedUpstream
from tests.support.upstream import FakeUpstream

WINDOW = 128_000  # brain-1's context_window in tests/support/live.py


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with ThreadedUpstream() as up:
        yield up


@pytest.fixture
def crashable(upstream: FakeUpstream, tmp_path: Path) -> Iterator[Crashable]:
    server = Crashable(upstream, tmp_path)
    try:
        yield server
    finally:
        server.close()


def meter_of(reader: Reader) -> agent_pb2.ConversationTokenDetails:
    """The token details of the run's last checkpoint, checked for what every meter must hold:
    every category once, in our order, with our labels, summing exactly to used."""
    checkpoint = last_checkpoint(reader)
    assert checkpoint.HasField("token_details"), reader.kinds
    details = checkpoint.token_details
    breakdown = details.breakdown
    assert details.max_tokens == WINDOW and breakdown.max_tokens == WINDOW
    assert breakdown.total_used_tokens == details.used_tokens
    assert [c.id for c in breakdown.categories] == [c.value for c in Category]
    assert [c.label for c in breakdown.categories] == [LABELS[c] for c in Category]
    assert sum(c.estimated_tokens for c in breakdown.categories) == details.used_tokens
    return details


def tokens(details: agent_pb2.ConversationTokenDetails) -> dict[str, int]:
    return {c.id: c.estimated_tokens for c in details.breakdown.categories}


def chars(details: agent_pb2.ConversationTokenDetails) -> dict[str, int]:
    return {c.id: c.character_count for c in details.breakdown.categories}


async def turn(
    server: ServerProcess,
    transport: str,
    message: agent_pb2.AgentClientMessage,
) -> agent_pb2.ConversationTokenDetails:
    async with open_run(server, transport) as (send, reader):
        await send(message)
        assert await reader.wait_end() == {}, reader.kinds
    assert reader.turn_ended
    return meter_of(reader)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_checkpoint_carries_the_meter_and_it_survives_kill9(
    crashable: Crashable, upstream: FakeUpstream, transport: str
) -> None:
    cid = str(uuid.uuid4())
    server = crashable.start()
    state: agent_pb2.ConversationStateStructure | None = None
    meters: list[agent_pb2.ConversationTokenDetails] = []
    # (prompt tokens, of them cached) the brain reports for each turn's calls
    usages = [(3_000, 1_000), (5_500, 3_000), (9_100, 5_500)]
    for n, (prompt_tokens, cached) in enumerate(usages):
        if n == 2:  # the server dies between turns; a new process serves the third
            crashable.kill9()
            server = crashable.start()
        text = unique(f"[usage {prompt_tokens} {cached}] turn {n + 1}")
        if n == 1:  # a turn with a tool call: two model calls, the meter takes the last
            text += ' [tool Read {"path": "/w/missing.txt"}]'
        message = moded_request(text, "agent", cid, mcp="lookup_ticket", state=state)
        async with open_run(server, transport) as (send, reader):
            await send(message)
            if n == 1:
                ask = (await reader.wait_for(exec_of("read_args"))).exec_server_message
                await send(read_ok(ask.id, ask.read_args.path, "x = 1\n" * 40))
            assert await reader.wait_end() == {}, reader.kinds
        assert reader.turn_ended
        details = meter_of(reader)
        state = last_checkpoint(reader)
        # the total is the provider's: input plus cached (our `input` excludes the cache)
        assert details.used_tokens == prompt_tokens, (n, details)
        meters.append(details)
        bodies = chat_requests(upstream, text)
        assert bodies and all(b["messages"][-1]["role"] in ("user", "tool") for b in bodies)
    assert [m.used_tokens for m in meters] == [3_000, 5_500, 9_100]  # it grows turn by turn
    for details in meters:
        t, c = tokens(details), chars(details)
        # what every request of ours holds: our system prompt, native tools, one MCP tool
        assert t["system_prompt"] > 0 and t["tools"] > 0 and t["mcp"] > 0
        assert c["tools"] > c["mcp"] > len("lookup_ticket")
        assert t["conversation"] > 0
        # Task's definition describes the subagent types: the subagent definitions
        assert t["subagents"] > 0 and c["subagents"] > len("Task")
        # the client sent no skills, and nothing was compacted
        assert t["skills"] == t["summarized_conversation"] == 0
        assert t["rules"] == 0
    conversation = [chars(m)["conversation"] for m in meters]
    assert conversation[0] < conversation[1] < conversation[2]

    # A turn without a model call (a `!command` note) on yet another process: its checkpoint
    # shows the last measured call, read back from the store.
    crashable.kill9()
    server = crashable.start()

    def shell(action: agent_pb2.ConversationAction) -> None:
        action.shell_command_action.shell_command.command = "make test"
        action.shell_command_action.exec_id = "e1"

    before = len(upstream.requests)
    details = await turn(server, transport, _action_request(shell, cid, state))
    assert len(upstream.requests) == before
    assert details.used_tokens == 9_100
    assert tokens(details) == tokens(meters[-1])

    # Each call's record keeps its meter: scaled to the provider's usage once it finished.
    with db_reader(crashable.db) as conn:
        rows = conn.execute(
            "SELECT input_tokens, cache_read_tokens, prompt_breakdown FROM llm_calls "
            "WHERE conversation_id = ? AND status = 'committed' ORDER BY created_at_ms, call_id",
            (cid,),
        ).fetchall()
    assert len(rows) == 4  # one call per turn, two in the tool turn
    for input_tokens, cache_read, breakdown in rows:
        kept = records.decode_call_meter(breakdown)
        assert kept.meter.measured and kept.meter.max_tokens == WINDOW
        assert kept.meter.used_tokens == input_tokens + cache_read
        assert sum(c.tokens for c in kept.meter.categories) == kept.meter.used_tokens
    last = records.decode_call_meter(rows[-1][2]).meter
    assert [c.tokens for c in last.categories] == list(tokens(meters[-1]).values())


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_before_any_usage_the_meter_is_our_estimate(
    crashable: Crashable, upstream: FakeUpstream, transport: str
) -> None:
    """A provider that reports no usage (`[usage 0 0]`): the meter is the estimate, never 0."""
    server = crashable.start()
    text = unique("[usage 0 0] no usage here")
    details = await turn(server, transport, moded_request(text, "agent"))
    assert details.used_tokens > 1_000  # at least our system prompt and tool definitions
    c = chars(details)
    assert tokens(details)["tools"] == -(-c["tools"] // 4)  # as estimated, not scaled
