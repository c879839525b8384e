"""Compaction against the REAL server process, over the HTTP/1.1 shim and HTTP/2 `Run`, with the
scripted brain upstream on a model whose window is small (`brain-small`: the brain reports the
request's size as its prompt tokens, as a real model would).

A conversation that crosses the threshold: the exact update sequence, the summary in the
checkpoint, the request after the compaction (our summary first, then the kept tail, no broken
tool pair) and byte-prefix extension afterwards. /summarize below the threshold and on an empty
conversation. "Context length exceeded" (llama-server's body and OpenAI's): one compaction and a
successful new call, never a loop."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cursor_byok.loop import compaction
from cursor_byok.transport.cursor.proto import agent_pb2
from cursor_byok.transport.runtime.summaries import HOOK_MESSAGE, NOTHING_TO_COMPACT
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    content_text,
    exec_of,
    http,
    kind,
    read_ok,
    run_request,
)
from tests.support.brain import answer, overflow, summary_of
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream, Received

SMALL = "brain-small"
# The fixed part of a request (system prompt and agent tools) is about 3,300 tokens; the window
# leaves room for a few turns of ~300 tokens each.
SMALL_MODEL = f"""
[models."{SMALL}"]
provider = "brain"
model = "{SMALL}"
context_window = 8000
max_output_tokens = 500
"""

SUMMARY_KINDS = [
    "interaction_update.summary_started",
    "interaction_update.summary",
    "interaction_update.summary_completed",
]


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("server")
    config = brain_config(upstream.base_url, db=work / "byok.db") + SMALL_MODEL
    with server_process(config, work) as srv:
        yield srv


def summarize_request(conversation_id: str) -> agent_pb2.AgentClientMessage:
    req = agent_pb2.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = SMALL
    req.action.summarize_action.SetInParent()
    return agent_pb2.AgentClientMessage(run_request=req)


def updates(reader: Reader) -> list[str]:
    """The run's interaction updates and checkpoints, without heartbeats and KV traffic."""
    return [
        k
        for k in reader.kinds
        if k.startswith(("interaction_update.", "conversation_checkpoint_update"))
        and k != "interaction_update.heartbeat"
    ]


def collapsed(kinds: list[str]) -> list[str]:
    """Runs of the same kind as one entry (text deltas stream in many)."""
    out: list[str] = []
    for k in kinds:
        if not out or out[-1] != k:
            out.append(k)
    return out


def checkpoint_of(reader: Reader) -> agent_pb2.ConversationStateStructure:
    (last,) = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if kind(m) == "conversation_checkpoint_update"
    ]
    return last


def message_of(reader: Reader, name: str) -> Any:
    (found,) = [
        getattr(m.interaction_update, name)
        for m in reader.messages
        if kind(m) == f"interaction_update.{name}"
    ]
    return found


def bodies_of(upstream: FakeUpstream, conversation: str, since: int) -> list[Received]:
    return [r for r in list(upstream.requests)[since:] if conversation.encode() in r.body]


def messages_bytes(body: bytes) -> bytes:
    """The bytes of the request's `messages` array, as sent."""
    text = body.decode()
    start = text.index('"messages":') + len('"messages":')
    _, end = json.JSONDecoder().raw_decode(text, start)
    return text[start:end].encode()


async def shim_turn(server: ServerProcess, message: agent_pb2.AgentClientMessage) -> Reader:
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(message)
            end = await reader.wait_end()
    assert end == {}, end
    return reader


async def test_a_conversation_crossing_the_threshold_is_compacted_once_and_goes_on(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    conversation = str(uuid.uuid4())
    tag = uuid.uuid4().hex[:8]
    padding = "lorem ipsum dolor " * 70  # about 300 tokens by the character estimate
    compacted_at: int | None = None
    reader: Reader | None = None
    meters: list[agent_pb2.ConversationTokenDetails] = []  # each turn's checkpoint
    for turn in range(12):
        since = len(upstream.requests)
        prompt = f"turn {turn} of {tag} {conversation} {padding}"
        reader = await shim_turn(server, run_request(prompt, conversation, model=SMALL))
        meters.append(checkpoint_of(reader).token_details)
        if "interaction_update.summary_started" in reader.kinds:
            compacted_at = turn
            break
    assert compacted_at is not None and compacted_at >= 2, "the window never filled"
    assert reader is not None

    # The exact sequence: the summary's updates, then the turn's answer, its end, the checkpoint.
    assert collapsed(updates(reader)) == [
        *SUMMARY_KINDS,
        "interaction_update.text_delta",
        "interaction_update.turn_ended",
        "conversation_checkpoint_update",
    ]
    summary = summary_of("## User\n" * compacted_at)
    assert message_of(reader, "summary").summary == summary
    assert message_of(reader, "summary_completed").hook_message == HOOK_MESSAGE
    assert "".join(reader.texts) == f"You said: {prompt}"

    # The checkpoint carries the summary (reference §5): the latest, one archive, the count.
    state = checkpoint_of(reader)
    assert agent_pb2.ConversationSummary.FromString(state.summary).summary == summary
    (archive,) = [
        agent_pb2.ConversationSummaryArchive.FromString(b) for b in state.summary_archives
    ]
    assert archive.summary == summary and archive.window_tail == 1
    assert state.self_summary_count == 1

    # The context meter: it grew turn by turn, and the compaction brought it down; each
    # checkpoint's categories sum exactly to `used`; after it, the summary is its own category.
    used = [m.used_tokens for m in meters]
    assert used[:-1] == sorted(used[:-1]) and used[-1] < used[-2]
    for m in meters:
        assert m.max_tokens == m.breakdown.max_tokens > 0
        assert sum(c.estimated_tokens for c in m.breakdown.categories) == m.used_tokens
    by_id = {c.id: c for c in meters[-1].breakdown.categories}
    assert by_id["summarized_conversation"].estimated_tokens > 0
    assert all(
        c.estimated_tokens == 0
        for c in meters[-2].breakdown.categories
        if c.id == "summarized_conversation"
    )

    # Upstream: the summary call (our prompt, the transcript), then the turn's call over the
    # compacted view: the summary first, then the kept tail (this turn's message).
    requests = bodies_of(upstream, conversation, since)
    assert len(requests) == 2
    summary_call, call = (json.loads(r.body) for r in requests)
    assert summary_call["messages"][0] == {"role": "system", "content": compaction.SUMMARY_PROMPT}
    assert content_text(summary_call["messages"][1]["content"]).startswith(
        "Transcript to summarize:"
    )
    assert summary_call["max_tokens"] <= 500
    sent = call["messages"]
    assert sent[0]["role"] == "system"
    assert sent[1] == {"role": "user", "content": compaction.SUMMARY_HEADER + summary}
    assert sent[2] == {"role": "user", "content": prompt}
    assert len(sent) == 3 and not any(m["role"] == "tool" for m in sent)
    first_turn = f"turn 0 of {tag}"
    assert first_turn not in requests[1].body.decode()

    # Afterwards, consecutive requests extend each other byte for byte again.
    since = len(upstream.requests)
    nxt = await shim_turn(
        server, run_request(f"after {tag} {conversation}", conversation, model=SMALL)
    )
    assert "interaction_update.summary_started" not in nxt.kinds
    (after,) = bodies_of(upstream, conversation, since)
    before_bytes, after_bytes = messages_bytes(requests[1].body), messages_bytes(after.body)
    assert after_bytes.startswith(before_bytes[:-1])
    assert json.loads(after.body)["tools"] == call["tools"]
    # The meter's checkpoint still says one compaction.
    assert checkpoint_of(nxt).self_summary_count == 1


async def test_summarize_below_the_threshold_over_h2(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    conversation = str(uuid.uuid4())
    for text in ("first question", "second question"):
        reader = await shim_turn(
            server, run_request(f"{text} {conversation}", conversation, model=SMALL)
        )
        assert "interaction_update.summary_started" not in reader.kinds
    since = len(upstream.requests)
    async with h2_run(server) as (stream, h2_reader):
        await stream.send(summarize_request(conversation))
        end = await h2_reader.wait_end()
    assert end == {}
    assert collapsed(updates(h2_reader)) == [
        *SUMMARY_KINDS,
        "interaction_update.turn_ended",
        "conversation_checkpoint_update",
    ]
    assert message_of(h2_reader, "summary").summary == summary_of("## User\n")
    (summary_call,) = bodies_of(upstream, conversation, since)
    assert "first question" in summary_call.body.decode()
    assert "second question" not in summary_call.body.decode()  # the kept tail
    assert checkpoint_of(h2_reader).self_summary_count == 1

    # The next turn's request: the summary, the kept turn, the new message.
    since = len(upstream.requests)
    await shim_turn(server, run_request(f"third {conversation}", conversation, model=SMALL))
    (call,) = bodies_of(upstream, conversation, since)
    sent = json.loads(call.body)["messages"]
    assert sent[1]["content"].startswith(compaction.SUMMARY_HEADER)
    assert sent[2] == {"role": "user", "content": f"second question {conversation}"}
    assert sent[3]["role"] == "assistant"
    assert sent[4] == {"role": "user", "content": f"third {conversation}"}


@pytest.mark.parametrize("transport", ["shim", "h2"])
async def test_summarize_an_empty_conversation_still_says_started_and_completed(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    conversation = str(uuid.uuid4())
    since = len(upstream.requests)
    if transport == "shim":
        reader = await shim_turn(server, summarize_request(conversation))
    else:
        async with h2_run(server) as (stream, reader):
            await stream.send(summarize_request(conversation))
            assert await reader.wait_end() == {}
    assert collapsed(updates(reader)) == [
        "interaction_update.summary_started",
        "interaction_update.summary_completed",
        "interaction_update.turn_ended",
        "conversation_checkpoint_update",
    ]
    assert message_of(reader, "summary_completed").hook_message == NOTHING_TO_COMPACT
    assert bodies_of(upstream, conversation, since) == []  # no model call at all
    assert checkpoint_of(reader).self_summary_count == 0


@pytest.mark.parametrize("marker", ["[overflow]", "[overflow-openai]"])
async def test_context_length_exceeded_compacts_once_and_a_new_call_succeeds(
    server: ServerProcess, upstream: FakeUpstream, marker: str
) -> None:
    conversation = str(uuid.uuid4())
    await shim_turn(server, run_request(f"hello {conversation}", conversation, model=SMALL))
    since = len(upstream.requests)
    prompt = f"{marker} please {conversation}"
    reader = await shim_turn(server, run_request(prompt, conversation, model=SMALL))
    assert collapsed(updates(reader)) == [
        *SUMMARY_KINDS,
        "interaction_update.text_delta",
        "interaction_update.turn_ended",
        "conversation_checkpoint_update",
    ]
    assert "".join(reader.texts) == f"You said: {prompt}"
    refused, summary_call, call = bodies_of(upstream, conversation, since)
    assert json.loads(summary_call.body)["messages"][0]["content"] == compaction.SUMMARY_PROMPT
    assert call.body != refused.body  # a new request, not the refused one again
    sent = json.loads(call.body)["messages"]
    assert sent[1]["content"].startswith(compaction.SUMMARY_HEADER)
    assert sent[2] == {"role": "user", "content": prompt}


async def test_a_second_refusal_after_compacting_fails_the_turn_and_never_loops(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """The compacted request is refused again (a window configured larger than the real one):
    the turn fails with the provider's error; there is no second compaction."""
    conversation = str(uuid.uuid4())
    await shim_turn(server, run_request(f"hello {conversation}", conversation, model=SMALL))
    since = len(upstream.requests)
    upstream.push(overflow, answer, overflow)  # refused, the summary, refused again
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(f"again {conversation}", conversation, model=SMALL))
            end = await reader.wait_end()
    assert end.get("error") is not None
    kinds = updates(reader)
    assert kinds.count("interaction_update.summary_started") == 1
    assert len(bodies_of(upstream, conversation, since)) == 3  # refused, summary, refused


def sample(metrics: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metrics.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{{{want}}} in /metrics")


async def test_the_operator_sees_the_compactions(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """After the tests above: compactions per model and reason, tokens before and after, the
    summary calls' cost in /metrics and on the dashboard, one log line each."""
    async with http(server) as client:
        metrics = (await client.get("/metrics")).text
        totals = (await client.get("/dashboard/api/summary")).json()["totals"]
    name = "cursor_byok_compactions_total"
    assert sample(metrics, name, model=SMALL, reason="threshold") == 1
    assert sample(metrics, name, model=SMALL, reason="requested") == 1
    assert sample(metrics, name, model=SMALL, reason="overflow") == 3
    before = sample(metrics, "cursor_byok_compaction_tokens_total", model=SMALL, when="before")
    after = sample(metrics, "cursor_byok_compaction_tokens_total", model=SMALL, when="after")
    assert before > after > 0
    # The brain has no prices: the cost is counted as 0, the series exists.
    assert sample(metrics, "cursor_byok_compaction_cost_usd_total", model=SMALL) == 0.0
    assert totals["summary_calls"] == 5 and totals["summary_cost_usd"] == 0.0
    lines = [line for line in server.log().splitlines() if "compacted (" in line]
    assert len(lines) == 5
    assert any(f"compacted (threshold, model {SMALL})" in line for line in lines)


async def test_one_long_turn_is_cut_inside_at_a_tool_result_boundary_over_h2(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """A single turn whose tool results fill the window: the cut goes inside the turn, after a
    tool result; the request after it starts with the summary, then an assistant message and
    the results of exactly its calls; the turn then finishes."""
    conversation = str(uuid.uuid4())
    path = f"/w/big-{conversation[:8]}.txt"
    content = "a line of a large file that the model reads again and again\n" * 40  # ~600 tokens
    prompt = f"[reads 9 {path}] {conversation}"
    since = len(upstream.requests)
    answered: set[int] = set()

    def unanswered_read(m: agent_pb2.AgentServerMessage) -> bool:
        return exec_of("read_args")(m) and m.exec_server_message.id not in answered

    async with h2_run(server) as (stream, reader):
        await stream.send(run_request(prompt, conversation, model=SMALL))
        for _ in range(9):
            ask = await reader.wait_for(unanswered_read)
            esm = ask.exec_server_message
            answered.add(esm.id)
            await stream.send(read_ok(esm.id, esm.read_args.path, content))
        end = await reader.wait_end()
    assert end == {}, end
    assert "".join(reader.texts).endswith("Read it 9 times.")
    kinds = updates(reader)
    compactions = kinds.count("interaction_update.summary_started")
    assert compactions >= 1
    assert kinds.count("interaction_update.summary_completed") == compactions

    # The requests of this turn: each holds the file's path (in the summary, too).
    bodies = [json.loads(r.body) for r in bodies_of(upstream, path, since)]
    summaries = [
        i for i, b in enumerate(bodies) if b["messages"][0]["content"] == compaction.SUMMARY_PROMPT
    ]
    assert len(summaries) == compactions
    # Never a compaction right after another: each frees room for several model calls.
    assert all(b - a >= 3 for a, b in itertools.pairwise(summaries))
    k = summaries[0]
    after = bodies[k + 1]["messages"]
    assert after[1]["role"] == "user" and after[1]["content"].startswith(compaction.SUMMARY_HEADER)
    assert f"[reads 9 {path}]" in after[1]["content"]  # the summary carries the turn on
    assert after[2]["role"] == "assistant" and after[2]["tool_calls"]
    calls = {c["id"] for m in after if m["role"] == "assistant" for c in m.get("tool_calls", [])}
    results = {m["tool_call_id"] for m in after if m["role"] == "tool"}
    assert calls == results  # no broken pair
    assert prompt not in json.dumps(after)  # the turn's own message was summarized
    # Every request of the turn after a compaction extends the one before it, up to the next.
    for prev, nxt in itertools.pairwise(bodies):
        if nxt["messages"][0]["content"] == compaction.SUMMARY_PROMPT:
            continue
        if prev["messages"][0]["content"] == compaction.SUMMARY_PROMPT:
            continue
        if nxt["messages"][1]["content"] != prev["messages"][1]["content"]:
            continue  # the first request of a new epoch
        assert nxt["messages"][: len(prev["messages"])] == prev["messages"]
