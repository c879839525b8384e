"""What the end of a turn writes rides with the commit of its answer: the turn marks of its
checkpoint and the run's outcome in that transaction, no write of their own after it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from cursor_byok.config import parse_config
from cursor_byok.observability.routes import Observability
from cursor_byok.store.api import RunOutcomeRecord, TurnMark
from cursor_byok.transport.runtime.summary import RunSummary
from tests.runtime.harness import MODEL, Client, Server, cancel, open_server, run_request

CONFIG = """
[providers.p]
api = "openai-chat"
api_key = "sk-test"

[models.m]
provider = "p"
model = "m"
"""


def spy(server: Server) -> tuple[list[dict[str, Any]], list[tuple[TurnMark, ...]]]:
    """The keyword arguments of each commit, and the marks of each save_turn_marks."""
    commits: list[dict[str, Any]] = []
    saved: list[tuple[TurnMark, ...]] = []
    store = server.store
    commit, save = store.commit_input, store.save_turn_marks

    async def commit_input(conversation_id: str, **kw: Any) -> Any:
        commits.append(kw)
        return await commit(conversation_id, **kw)

    async def save_turn_marks(conversation_id: str, marks: Any, **kw: Any) -> None:
        saved.append(tuple(marks))
        await save(conversation_id, marks, **kw)

    store.commit_input = commit_input  # type: ignore[method-assign]
    store.save_turn_marks = save_turn_marks  # type: ignore[method-assign]
    return commits, saved


async def test_the_turn_marks_ride_with_the_answer(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["one", "two"], chunk_size=50)
    commits, saved = spy(server)
    blobs: dict[bytes, bytes] = {}
    turns: list[bytes] = []
    for n, text in enumerate(["q1", "q2"], start=1):
        first = len(commits)
        client = Client(f"r{n}")
        client.blobs = blobs
        client.say(run_request("c1", text, turns=turns or None))
        server.start(client)
        assert await client.ended() is None
        turns = list(client.sent[-1].conversation_checkpoint_update.turns)
        # The last commit of the turn (its answer) carried the marks the checkpoint lists.
        last = commits[-1]
        assert [m.blob_id for m in last["turn_marks"]] == turns
        assert last["unchanged_marks"] == n - 1  # only the turn's own mark is new
        assert all(c.get("turn_marks") is None for c in commits[first:-1])
    assert saved == []  # no write of their own
    marks = await server.store.list_turn_marks("c1")
    assert [m.blob_id for m in marks] == turns and [m.turn for m in marks] == [1, 2]
    await server.store.close()


async def test_a_conflicting_commit_leaves_the_marks_to_the_one_that_commits(
    tmp_path: Path,
) -> None:
    """The answer's commit refused (another writer moved the conversation): the marks of the
    one that commits after the reload are the ones saved."""
    server = await open_server(tmp_path / "db", ["one"], chunk_size=50)
    _, saved = spy(server)
    store = server.store
    commit = store.commit_input
    conflicted: list[int] = []

    async def commit_input(conversation_id: str, **kw: Any) -> Any:
        if kw.get("turn_marks") is not None and not conflicted:
            # Another writer's commit lands first: this one's version is stale.
            conflicted.append(kw["expected_version"])
            record = await store.load(conversation_id)
            assert record is not None
            await commit(
                conversation_id,
                input_id="elsewhere",
                expected_version=record.version,
                state=record.state,
                append_messages=(),
                expected_message_count=len(record.messages),
                result=b"",
            )
        return await commit(conversation_id, **kw)

    store.commit_input = commit_input  # type: ignore[method-assign]
    client = Client("r1")
    client.say(run_request("c1", "q1"))
    server.start(client)
    assert await client.ended() is None
    assert conflicted
    turns = list(client.sent[-1].conversation_checkpoint_update.turns)
    marks = await store.list_turn_marks("c1")
    assert [m.blob_id for m in marks] == turns
    assert saved == []
    await store.close()


async def observed(server: Server) -> tuple[Observability, list[RunOutcomeRecord]]:
    """The server's runs observed as the composition root does (app.py), each outcome
    written on its own recorded."""
    obs = Observability(parse_config(CONFIG), server.store)
    services = server.runner.services
    services.on_run_end, services.outcome_row = obs.on_run_end, obs.outcome_row
    alone: list[RunOutcomeRecord] = []
    save = server.store.save_run_outcome

    async def save_run_outcome(record: RunOutcomeRecord) -> Any:
        alone.append(record)
        return await save(record)

    server.store.save_run_outcome = save_run_outcome  # type: ignore[method-assign]
    return obs, alone


async def test_the_outcome_rides_with_the_answer(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["one"], chunk_size=50)
    commits, _ = spy(server)
    obs, alone = await observed(server)
    ended: list[RunSummary] = []
    on_run_end = obs.on_run_end
    server.runner.services.on_run_end = lambda s: (ended.append(s), on_run_end(s))[-1]
    client = Client("r1")
    client.say(run_request("c1", "q1"))
    server.start(client)
    assert await client.ended() is None
    await asyncio.sleep(0)  # on_run_end runs soon after the end
    await obs.aclose()
    row = commits[-1]["run_outcome"]
    assert (row.request_id, row.conversation_id, row.outcome) == ("r1", "c1", "ok")
    assert (row.llm_calls, row.title, row.model) == (1, "q1", MODEL.id)
    # The answer's call counted before its commit: the row says what the run's summary says.
    (summary,) = ended
    assert (row.llm_calls, row.unpriced_calls, row.cost_usd) == (
        summary.llm_calls,
        summary.unpriced_calls,
        summary.cost_usd,
    )
    assert (row.input_tokens, row.output_tokens) == (summary.usage.input, summary.usage.output)
    assert summary.outcome_stored == summary.outcome == "ok"
    assert all(c.get("run_outcome") is None for c in commits[:-1])
    assert alone == []  # no write of its own
    assert await server.store.list_recent_run_outcomes() == (row,)
    await server.store.close()


async def test_a_run_without_an_answer_stores_its_outcome_at_its_end(tmp_path: Path) -> None:
    server = await open_server(tmp_path / "db", ["a long answer " * 20], chunk_size=4, delay=0.02)
    commits, _ = spy(server)
    obs, alone = await observed(server)
    client = Client("r1")
    client.say(run_request("c1"))
    server.start(client)
    await client.until(lambda: len(client.sent) >= 2, "two deltas")
    client.say(cancel("enough"))
    assert await client.ended() is not None
    await asyncio.sleep(0)
    await obs.aclose()
    assert all(c.get("run_outcome") is None for c in commits)
    assert [(r.request_id, r.outcome) for r in alone] == [("r1", "canceled")]
    stored = await server.store.list_recent_run_outcomes()
    assert [(r.request_id, r.outcome) for r in stored] == [("r1", "canceled")]
    await server.store.close()
