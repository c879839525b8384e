"""Process leases (transport/runtime/leases.py) on both backends: a starting process finishes
the planned calls of processes that are provably gone (their lease ended or expired, or their
pid on this host is no longer theirs) and never a live sibling's, whoever shares the database;
each taken call is canceled with its estimated input, priced at the prices stored with it,
and counted; the lease ends at a
graceful stop."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from cursor_byok.llm.models import Model, Prices, encode_prices
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.loop.meter import PromptChars, measure
from cursor_byok.store import AnyStore, open_store
from cursor_byok.store.api import CallOwner, LLMCallRecord, ProcessLease
from cursor_byok.transport.runtime.leases import (
    ProcessLeases,
    gone_because,
    host_identity,
    start_time,
)
from cursor_byok.transport.runtime.records import encode_call_meter
from tests.support.postgres import Cluster

NOW = 1_000_000
HOST = host_identity()
CHARS = PromptChars(system_prompt=4_000, conversation=2_000)  # 1,500 tokens by our estimate
MODEL = Model(
    id="m",
    display_name="M",
    provider=ProviderSettings(name="prov", api="openai-chat", base_url="http://x.invalid"),
    settings=ModelSettings(model="up-m"),
    context_window=100_000,
    prices=Prices(input=2.0, output=8.0),
)
_DATABASES = itertools.count(1)


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnyStore]:
    if request.param == "sqlite":
        database = str(tmp_path / "leases.db")
    else:
        cluster: Cluster = request.getfixturevalue("pg_cluster")
        database = cluster.create_database(f"leases{next(_DATABASES)}")
    s = await open_store(database)
    try:
        yield s
    finally:
        await s.close()


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def lease(
    process_id: str, *, pid: int, expires: int = NOW + 30_000, host: str = HOST
) -> ProcessLease:
    return ProcessLease(
        process_id=process_id,
        host=host,
        pid=pid,
        pid_started=(start_time(pid) or 1) if pid == os.getpid() else 12345,
        started_at_ms=NOW - 60_000,
        renewed_at_ms=expires - 30_000,
        expires_at_ms=expires,
    )


def planned(call_id: str, owner: str | None, prices: Prices | None = MODEL.prices) -> LLMCallRecord:
    body = f'{{"call":"{call_id}"}}'.encode()
    return LLMCallRecord(
        call_id=call_id,
        conversation_id="c1",
        turn_id="c1:1",
        request=body,
        request_hash=hashlib.sha256(body).hexdigest(),
        messages_hash="m" * 64,
        status="planned",
        created_at_ms=NOW - 5_000,
        provider="prov",
        model="up-m",
        prompt_breakdown=encode_call_meter(CHARS, measure(CHARS, used=0, window=100_000)),
        process_id=owner,
        prices=encode_prices(prices),
    )


async def seed(store: AnyStore, calls: list[LLMCallRecord]) -> None:
    await store.commit_input(
        "c1",
        input_id="i0",
        expected_version=0,
        state=b"s",
        append_messages=(),
        expected_message_count=0,
        result=b"r",
        llm_calls=calls,
    )


def test_a_pid_is_alive_only_as_the_process_that_took_the_lease() -> None:
    mine = start_time(os.getpid())
    assert mine is not None and mine > 0
    assert start_time(dead_pid()) is None
    alive = CallOwner(process_id="a", calls=1, lease=lease("a", pid=os.getpid()))
    assert gone_because(alive, NOW, HOST) is None


def test_why_an_owner_is_gone() -> None:
    pid = dead_pid()
    assert gone_because(CallOwner(process_id=None, calls=1), NOW, HOST) == (
        "made before this server kept process leases"
    )
    assert gone_because(CallOwner(process_id="x", calls=1), NOW, HOST) == (
        "its process left no lease"
    )
    ended = msgspec.structs.replace(lease("e", pid=os.getpid()), ended_at_ms=NOW - 1)
    assert gone_because(CallOwner(process_id="e", calls=1, lease=ended), NOW, HOST) == (
        "its process stopped without finishing it"
    )
    expired = lease("x", pid=os.getpid(), expires=NOW)
    assert gone_because(CallOwner(process_id="x", calls=1, lease=expired), NOW, HOST) == (
        "its process stopped renewing its lease"
    )
    died = lease("d", pid=pid)
    assert gone_because(CallOwner(process_id="d", calls=1, lease=died), NOW, HOST) == (
        f"its process (pid {pid}) is gone"
    )
    # A pid reused by another process: the start time differs.
    reused = msgspec.structs.replace(died, pid=os.getpid())
    assert gone_because(CallOwner(process_id="d", calls=1, lease=reused), NOW, HOST) == (
        f"its process (pid {os.getpid()}) is gone"
    )
    # On another host (or PID namespace) only the lease's expiry tells.
    elsewhere = lease("o", pid=pid, host="linux:another-boot:1")
    assert gone_because(CallOwner(process_id="o", calls=1, lease=elsewhere), NOW, HOST) is None


async def test_a_starting_process_takes_only_the_calls_of_owners_that_are_gone(
    store: AnyStore,
) -> None:
    pid = dead_pid()
    await store.save_lease(lease("sibling", pid=os.getpid()))  # alive: this very process
    await store.save_lease(lease("remote", pid=pid, host="linux:another-boot:1"))  # not expired
    await store.save_lease(lease("killed", pid=pid))  # kill -9: its pid is gone
    await store.save_lease(lease("stale", pid=pid, host="linux:another-boot:1", expires=NOW - 1))
    await seed(
        store,
        [
            planned("sib-1", "sibling"),
            planned("rem-1", "remote"),
            planned("kil-1", "killed"),
            planned("kil-2", "killed"),
            planned("sta-1", "stale"),
            planned("old-1", None, prices=None),  # made before calls kept their prices
        ],
    )
    counted: list[LLMCallRecord] = []
    starting = ProcessLeases(store, "starting", now_ms=lambda: NOW, on_llm_call=counted.append)
    await starting.start()
    try:
        ids = ("sib-1", "rem-1", "kil-1", "kil-2", "sta-1", "old-1")
        by_id = {c: await store.get_llm_call(c) for c in ids}
        # The live sibling's and the remote process's (lease not expired) are untouched.
        assert by_id["sib-1"] == planned("sib-1", "sibling")
        assert by_id["rem-1"] == planned("rem-1", "remote")
        for call_id, why in (
            ("kil-1", f"its process (pid {pid}) is gone"),
            ("kil-2", f"its process (pid {pid}) is gone"),
            ("sta-1", "its process stopped renewing its lease"),
            ("old-1", "made before this server kept process leases"),
        ):
            record = by_id[call_id]
            assert record is not None
            assert record.status == "canceled" and record.process_id == "starting"
            assert record.error == (
                f"the server process that made the call stopped before it ended ({why})"
            )
            assert (record.input_tokens, record.output_tokens) == (1_500, 0)
            assert record.estimated_tokens == "input,output"
            # Priced at the prices stored with the call when it was planned, never at
            # today's: a call stored without prices stays unpriced.
            if call_id == "old-1":
                assert record.cost_usd is None
            else:
                assert record.cost_usd == pytest.approx(1_500 * 2.0 / 1e6)
            assert record.finished_at_ms == NOW
        assert sorted(r.call_id for r in counted) == ["kil-1", "kil-2", "old-1", "sta-1"]
        owners = await store.planned_call_owners()
        assert sorted(o.process_id or "" for o in owners) == ["remote", "sibling"]
    finally:
        await starting.stop()


async def test_a_graceful_stop_ends_the_lease(store: AnyStore) -> None:
    keeper = ProcessLeases(store, "p1", now_ms=lambda: NOW)
    await keeper.start()
    await keeper.stop()
    await seed(store, [planned("left", "p1", prices=None)])  # left planned (a bug, say)
    (owner,) = await store.planned_call_owners()
    assert owner.lease is not None and owner.lease.ended_at_ms == NOW
    assert owner.lease.pid == os.getpid() and owner.lease.host == HOST
    assert gone_because(owner, NOW, HOST) == "its process stopped without finishing it"
    nxt = ProcessLeases(store, "p2", now_ms=lambda: NOW + 1)
    await nxt.start()
    await nxt.stop()
    record = await store.get_llm_call("left")
    assert record is not None and record.status == "canceled" and record.cost_usd is None
