"""Replicas: several server processes on one PostgreSQL database (docs/deploy.md, "Replicas").

A newer run of a conversation supersedes the busy one across replicas as it does inside one
process: the replica that takes the conversation announces it through the database (NOTIFY),
and the holder on the other replica gives way at once, not only when its next commit fails
the version check.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from cursor_byok.llm.types import AssistantMessage, UserMessage
from tests.e2e.test_shim import ShimRun, http, is_text, run_request, unique
from tests.e2e.test_two_processes import history
from tests.support.live import brain_config, server_process
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream

SLOW_S = 40  # the holder's answer streams this long: far beyond the bound asserted below


async def test_a_newer_run_on_another_replica_supersedes_the_busy_one_at_once(
    upstream: FakeUpstream, tmp_path: Path, pg_cluster: Cluster
) -> None:
    db = pg_cluster.create_database(f"replicas_{uuid.uuid4().hex[:8]}")
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    conversation = str(uuid.uuid4())
    slow = unique(f"[slow {SLOW_S}] from replica A")
    fast = unique("from replica B")
    with (
        server_process(brain_config(upstream.base_url, db=db), work_a) as a,
        server_process(brain_config(upstream.base_url, db=db), work_b) as b,
    ):
        async with http(a) as client_a, http(b) as client_b:
            run_a = ShimRun(client_a)
            run_b = ShimRun(client_b)
            async with run_a.subscribe() as reader_a:
                await run_a.append(run_request(slow, conversation))
                await reader_a.wait_for(is_text)  # A is streaming its slow answer
                started = time.monotonic()
                async with run_b.subscribe() as reader_b:
                    await run_b.append(run_request(fast, conversation))
                    end_a = await reader_a.wait_end(SLOW_S + 20)
                    a_gave_way_s = time.monotonic() - started
                    end_b = await reader_b.wait_end(30)
        logs = a.log() + b.log()
    assert end_a.get("error", {}).get("code") == "canceled", (end_a, logs)
    assert not reader_a.turn_ended
    # Without the claim A streams on for SLOW_S seconds and only then finds the version moved.
    assert a_gave_way_s < SLOW_S / 3, (a_gave_way_s, logs)
    assert "gives way" in a.log()
    assert end_b == {} and reader_b.turn_ended
    messages = history(db, conversation)
    assert [type(m) for m in messages] == [UserMessage, UserMessage, AssistantMessage]
    assert isinstance(messages[-1], AssistantMessage)
    assert messages[-1].text == f"You said: {fast}"
