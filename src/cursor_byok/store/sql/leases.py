"""The SQL of the process leases and of the "planned" calls they own (migration 0011).

Portable SQL both backends run (only the `?` placeholders differ; `RETURNING` and
`ON CONFLICT ... DO UPDATE` are SQLite 3.35+ and PostgreSQL alike). The store decides nothing:
which owners are dead is the runtime's to say (transport/runtime/leases.py); here a taker
only moves the calls of the owners it names to itself, atomically, so two processes taking
the calls of one dead owner at once never both get the same call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..api import CallOwner, LLMCallRecord, ProcessLease
from .conn import Conn
from .rows import CALL_FIELDS

_LEASE_FIELDS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(ProcessLease))
_LEASE_SELECT = f"SELECT {', '.join(_LEASE_FIELDS)} FROM process_leases"
_SAVE = (
    f"INSERT INTO process_leases ({', '.join(_LEASE_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _LEASE_FIELDS)}) "
    "ON CONFLICT (process_id) DO UPDATE SET "
    + ", ".join(f"{f} = excluded.{f}" for f in _LEASE_FIELDS if f != "process_id")
)


def _lease(row: Sequence[Any]) -> ProcessLease:
    return ProcessLease(**dict(zip(_LEASE_FIELDS, row, strict=True)))


def save_lease(conn: Conn, lease: ProcessLease) -> None:
    conn.execute(_SAVE, msgspec.structs.astuple(lease))


def planned_call_owners(conn: Conn) -> tuple[CallOwner, ...]:
    counts = conn.execute(
        "SELECT process_id, COUNT(*) FROM llm_calls WHERE status = 'planned' "
        "GROUP BY process_id ORDER BY process_id"
    ).fetchall()
    named = [r[0] for r in counts if r[0] is not None]
    leases: dict[str, ProcessLease] = {}
    if named:
        marks = ", ".join("?" for _ in named)
        for row in conn.execute(f"{_LEASE_SELECT} WHERE process_id IN ({marks})", named).fetchall():
            lease = _lease(row)
            leases[lease.process_id] = lease
    return tuple(
        CallOwner(process_id=r[0], calls=r[1], lease=leases.get(r[0]) if r[0] else None)
        for r in counts
    )


def take_planned_calls(
    conn: Conn, owner: str, owners: Sequence[str | None]
) -> tuple[LLMCallRecord, ...]:
    named = [o for o in owners if o is not None]
    clauses = []
    if named:
        clauses.append(f"process_id IN ({', '.join('?' for _ in named)})")
    if None in owners:
        clauses.append("process_id IS NULL")
    if not clauses:
        return ()
    rows = conn.execute(
        f"UPDATE llm_calls SET process_id = ? WHERE status = 'planned' "
        f"AND ({' OR '.join(clauses)}) RETURNING {', '.join(CALL_FIELDS)}",
        (owner, *named),
    ).fetchall()
    records = [LLMCallRecord(**dict(zip(CALL_FIELDS, r, strict=True))) for r in rows]
    return tuple(sorted(records, key=lambda r: (r.created_at_ms, r.call_id)))


def prune_leases(conn: Conn, expired_before_ms: int) -> int:
    cur = conn.execute(
        "DELETE FROM process_leases WHERE COALESCE(ended_at_ms, expires_at_ms) < ? "
        "AND NOT EXISTS (SELECT 1 FROM llm_calls WHERE llm_calls.status = 'planned' "
        "AND llm_calls.process_id = process_leases.process_id)",
        (expired_before_ms,),
    )
    return max(cur.rowcount, 0)
