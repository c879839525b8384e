from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from cursor_byok.store import (
    AnyStore,
    ClientOperationRecord,
    CommitResult,
    LLMCallRecord,
    PostgresStore,
    SQLiteStore,
    is_postgres_url,
    open_store,
)
from tests.support.postgres import Cluster

_DB_NUMBERS = itertools.count(1)


BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that asks for `backend` (directly or through `store` or `database`) runs on
    both backends, except those that also reach into the SQLite file (`db_path`)."""
    if "backend" in metafunc.fixturenames:
        sqlite_only = (
            "db_path" in metafunc.fixturenames
            or metafunc.definition.get_closest_marker("sqlite_only") is not None
        )
        metafunc.parametrize("backend", ("sqlite",) if sqlite_only else BACKENDS)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def database(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh empty database of `backend`: a file path, or the URL of a new PostgreSQL
    database on the suite's cluster."""
    if backend == "sqlite":
        return str(tmp_path / "store.db")
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    return cluster.create_database(f"t{next(_DB_NUMBERS)}")


@pytest.fixture
async def store(database: str) -> AsyncIterator[AnyStore]:
    s = await open_store(database)
    try:
        yield s
    finally:
        await s.close()


async def open_with_clock(database: str, clock: Callable[[], int]) -> AnyStore:
    """Another store on `database` whose writes are stamped by `clock`."""
    if is_postgres_url(database):
        return await PostgresStore.open(database, clock=clock)
    return await SQLiteStore.open(database, clock=clock)


def call_record(
    call_id: str, conversation_id: str = "c1", *, request: bytes = b'{"messages":[]}', **kw: object
) -> LLMCallRecord:
    values: dict[str, object] = {
        "call_id": call_id,
        "conversation_id": conversation_id,
        "turn_id": "t1",
        "request": request,
        "request_hash": hashlib.sha256(request).hexdigest(),
        "messages_hash": "m" * 64,
        "status": "planned",
        "created_at_ms": 1000,
    }
    values.update(kw)
    return LLMCallRecord(**values)  # type: ignore[arg-type]


def operation_record(
    operation_id: str, conversation_id: str = "c1", **kw: object
) -> ClientOperationRecord:
    values: dict[str, object] = {
        "operation_id": operation_id,
        "conversation_id": conversation_id,
        "turn_id": "t1",
        "tool_call_id": "tc1",
        "tool_index": 0,
        "tool_name": "Write",
        "side_effects": True,
        "request": b'{"path":"a.txt"}',
        "status": "planned",
        "updated_at_ms": 1000,
    }
    values.update(kw)
    return ClientOperationRecord(**values)  # type: ignore[arg-type]


async def commit(
    store: AnyStore,
    conversation_id: str,
    input_id: str,
    expected_version: int,
    messages: tuple[bytes, ...] = (),
    expected_message_count: int | None = None,
    *,
    state: bytes | None = None,
    result: bytes | None = None,
    llm_calls: tuple[LLMCallRecord, ...] = (),
    client_operations: tuple[ClientOperationRecord, ...] = (),
) -> CommitResult:
    """Commit helper: by default expects one message per earlier version (tests keep to that)."""
    return await store.commit_input(
        conversation_id,
        input_id=input_id,
        expected_version=expected_version,
        state=state if state is not None else f"state@{expected_version + 1}".encode(),
        append_messages=messages,
        expected_message_count=(
            expected_version if expected_message_count is None else expected_message_count
        ),
        result=result if result is not None else f"result:{input_id}".encode(),
        llm_calls=llm_calls,
        client_operations=client_operations,
    )


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding SQLite's write lock (as another process would)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        yield conn
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


async def wait_for_batch(store: AnyStore, batches_before: int) -> None:
    """Wait until the writer has taken a batch (it counts it before BEGIN IMMEDIATE)."""
    for _ in range(5000):
        if store.stats().batches > batches_before:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the writer did not take the job")
