"""The SQL of the tokens per person (migrations 0007, 0012), of the usage made under each, and
of the server's settings (`server_settings`, 0012).

Plain SQL a second backend can run as it is (only the `?` placeholders differ): no pragma,
no SQLite function. The store decides nothing: whether a token may call a model is the
runtime's to say (transport/runtime/access.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from ..api import (
    AccessTokenRecord,
    LLMCallRecord,
    Reservation,
    ReservationTotals,
    SaveResult,
    TokenUsage,
)
from .conn import Conn

_FIELDS = (
    "token_id",
    "name",
    "secret_hash",
    "models",
    "budget_usd",
    "rpm",
    "created_at_ms",
    "revoked_at_ms",
    "person_id",
)
_SELECT = f"SELECT {', '.join(_FIELDS)} FROM access_tokens"
_FINAL = "('committed', 'failed', 'canceled')"
# A call's person: its token's person, or the token id itself for a call whose token has no
# row (none is ever deleted; kept for calls recorded by hand).
# ('' in access_tokens.person_id: the token is its own person.)
_PERSON = "COALESCE(NULLIF(t.person_id, ''), c.token_id)"
_PERSON_OF = "COALESCE((SELECT NULLIF(person_id, '') FROM access_tokens WHERE token_id = ?), ?)"
_USAGE = f"""
SELECT {_PERSON}, COUNT(*), COALESCE(SUM(c.input_tokens), 0), COALESCE(SUM(c.output_tokens), 0),
       COALESCE(SUM(c.cache_read_tokens), 0), COALESCE(SUM(c.cache_write_tokens), 0),
       COALESCE(SUM(c.cost_usd), 0.0),
       COALESCE(SUM(CASE WHEN c.status IN {_FINAL} AND c.cost_usd IS NULL THEN 1 ELSE 0 END), 0)
FROM llm_calls c LEFT JOIN access_tokens t ON t.token_id = c.token_id
WHERE c.token_id IS NOT NULL AND c.created_at_ms >= ? AND c.created_at_ms < ?
"""


def _record(row: Any) -> AccessTokenRecord:
    values = dict(zip(_FIELDS, row, strict=True))
    values["models"] = tuple(msgspec.json.decode(values["models"], type=list[str]))
    return AccessTokenRecord(**values)


def add(conn: Conn, record: AccessTokenRecord) -> SaveResult:
    clash = conn.execute(
        "SELECT name FROM access_tokens WHERE token_id = ? OR secret_hash = ? "
        "OR (name = ? AND revoked_at_ms IS NULL)",
        (record.token_id, record.secret_hash, record.name),
    ).fetchone()
    if clash is not None:
        return SaveResult(outcome="ignored", reason=f"a token named {clash[0]!r} is active")
    _insert(conn, record)
    return SaveResult(outcome="inserted")


def _insert(conn: Conn, record: AccessTokenRecord) -> None:
    conn.execute(
        f"INSERT INTO access_tokens ({', '.join(_FIELDS)}) "
        f"VALUES ({', '.join('?' for _ in _FIELDS)})",
        (
            record.token_id,
            record.name,
            record.secret_hash,
            msgspec.json.encode(list(record.models)).decode(),
            record.budget_usd,
            record.rpm,
            record.created_at_ms,
            record.revoked_at_ms,
            record.person_id,
        ),
    )


def find(conn: Conn, secret_hash: str) -> AccessTokenRecord | None:
    row = conn.execute(f"{_SELECT} WHERE secret_hash = ?", (secret_hash,)).fetchone()
    return None if row is None else _record(row)


def get(conn: Conn, token_id: str) -> AccessTokenRecord | None:
    row = conn.execute(f"{_SELECT} WHERE token_id = ?", (token_id,)).fetchone()
    return None if row is None else _record(row)


def listing(conn: Conn, include_revoked: bool) -> tuple[AccessTokenRecord, ...]:
    where = "" if include_revoked else " WHERE revoked_at_ms IS NULL"
    rows = conn.execute(f"{_SELECT}{where} ORDER BY name, created_at_ms DESC").fetchall()
    return tuple(_record(r) for r in rows)


def revoke(conn: Conn, name: str, at_ms: int) -> AccessTokenRecord | None:
    row = conn.execute(
        "SELECT token_id FROM access_tokens WHERE name = ? AND revoked_at_ms IS NULL", (name,)
    ).fetchone()
    if row is None:
        return None
    conn.execute("UPDATE access_tokens SET revoked_at_ms = ? WHERE token_id = ?", (at_ms, row[0]))
    return get(conn, str(row[0]))


def rotate(
    conn: Conn, name: str, token_id: str, secret_hash: str, at_ms: int
) -> AccessTokenRecord | None:
    """Revoke the active token `name` and add its successor (same person and limits, the new
    id and secret hash) in one transaction; the successor, or None when none is active."""
    row = conn.execute(f"{_SELECT} WHERE name = ? AND revoked_at_ms IS NULL", (name,)).fetchone()
    if row is None:
        return None
    old = _record(row)
    conn.execute(
        "UPDATE access_tokens SET revoked_at_ms = ? WHERE token_id = ?", (at_ms, old.token_id)
    )
    new = msgspec.structs.replace(
        old,
        token_id=token_id,
        secret_hash=secret_hash,
        created_at_ms=at_ms,
        revoked_at_ms=None,
        person_id=old.person,
    )
    _insert(conn, new)  # a clash of id or hash (never seen: 256 random bits) breaks a key
    return new


# The spend of a token's person: the calls of every token of its chain of rotations (each an
# index-only range scan of llm_calls_token_spend).
_SPEND = f"""
WITH p(id) AS (SELECT {_PERSON_OF})
SELECT COALESCE(SUM(cost_usd), 0.0) FROM llm_calls
WHERE token_id IN (
    SELECT token_id FROM access_tokens, p WHERE person_id = p.id OR token_id = p.id
    UNION SELECT id FROM p
) AND created_at_ms >= ? AND created_at_ms < ?
"""


def spend(conn: Conn, token_id: str, since_ms: int, until_ms: int) -> float:
    args = (token_id, token_id, since_ms, until_ms)
    return float(conn.execute(_SPEND, args).fetchone()[0])


# The person's tokens, its root token's row taken as a lock first: on PostgreSQL the no-op
# UPDATE holds that row until the transaction ends, so two reservations of one person, from
# any process or replica, are checked one after the other, and the second one's sum (a new
# snapshot under read committed) sees the first one's call. SQLite's writers are serialized
# by its write lock (BEGIN IMMEDIATE) already; there the UPDATE changes nothing.
_LOCK = f"UPDATE access_tokens SET person_id = person_id WHERE token_id = {_PERSON_OF}"
_IN_FLIGHT = "('planned', 'streaming')"
_TOTALS = f"""
WITH p(id) AS (SELECT {_PERSON_OF})
SELECT
    COALESCE(SUM(CASE WHEN status IN {_IN_FLIGHT} OR created_at_ms < ? THEN 0.0
                      ELSE COALESCE(cost_usd, 0.0) END), 0.0),
    COALESCE(SUM(CASE WHEN status IN {_IN_FLIGHT} AND created_at_ms >= ?
                      THEN COALESCE(reserved_usd, 0.0) ELSE 0.0 END), 0.0),
    COALESCE(SUM(CASE WHEN created_at_ms >= ? THEN 1 ELSE 0 END), 0),
    MIN(CASE WHEN created_at_ms >= ? THEN created_at_ms END)
FROM llm_calls
WHERE token_id IN (
    SELECT token_id FROM access_tokens, p WHERE person_id = p.id OR token_id = p.id
    UNION SELECT id FROM p
) AND created_at_ms >= ? AND created_at_ms < ?
"""
_FINAL_STATUSES = ("committed", "failed", "canceled")


def reservation_totals(
    conn: Conn, reserve: Reservation, calls: Sequence[LLMCallRecord] = ()
) -> ReservationTotals:
    """The person's spent, reserved and recent calls, and whether `reserve` fits them (see
    store.api.Reservation). Runs inside the commit's transaction, before its writes: the
    commit's own call records count as the commit leaves them (a call it finishes settles to
    its cost in the same step), not as their rows stand."""
    conn.execute(_LOCK, (reserve.token_id, reserve.token_id))
    since = reserve.since_ms if reserve.budget_usd is not None else reserve.until_ms
    rate_since = reserve.rate_since_ms if reserve.rpm is not None else reserve.until_ms
    low = min(since, rate_since)
    ids = tuple(c.call_id for c in calls)
    sql = _TOTALS + (f" AND call_id NOT IN ({', '.join('?' for _ in ids)})" if ids else "")
    args = (reserve.token_id, reserve.token_id, since, since, rate_since, rate_since, low)
    row = conn.execute(sql, (*args, reserve.until_ms, *ids)).fetchone()
    spent, reserved, recent = float(row[0]), float(row[1]), int(row[2])
    oldest = None if row[3] is None else int(row[3])
    for call in calls:
        at = call.created_at_ms
        if call.token_id != reserve.token_id or call.status not in _FINAL_STATUSES:
            continue  # another person's, or the call this reservation is for
        if since <= at < reserve.until_ms:
            spent += call.cost_usd or 0.0
        if rate_since <= at < reserve.until_ms:
            recent += 1
            oldest = at if oldest is None else min(oldest, at)
    refused_by: Literal["budget", "rate"] | None = None
    if (
        reserve.budget_usd is not None
        and spent + reserved + reserve.amount_usd > reserve.budget_usd
    ):
        refused_by = "budget"
    elif reserve.rpm is not None and recent >= reserve.rpm:
        refused_by = "rate"
    return ReservationTotals(
        spent_usd=spent,
        reserved_usd=reserved,
        recent_calls=recent,
        oldest_recent_ms=oldest,
        refused_by=refused_by,
    )


def usage(conn: Conn, since_ms: int, until_ms: int, token_id: str | None) -> tuple[TokenUsage, ...]:
    sql, args = _USAGE, list[object]([since_ms, until_ms])
    if token_id is not None:
        sql += f" AND {_PERSON} = {_PERSON_OF}"
        args += [token_id, token_id]
    rows = conn.execute(sql + f" GROUP BY {_PERSON} ORDER BY {_PERSON}", args).fetchall()
    return tuple(
        TokenUsage(
            token_id=r[0],
            llm_calls=r[1],
            input_tokens=r[2],
            output_tokens=r[3],
            cache_read_tokens=r[4],
            cache_write_tokens=r[5],
            cost_usd=float(r[6]),
            unpriced_calls=r[7],
        )
        for r in rows
    )


def get_setting(conn: Conn, name: str) -> str | None:
    row = conn.execute("SELECT value FROM server_settings WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def set_setting(conn: Conn, name: str, value: str, at_ms: int) -> None:
    conn.execute(
        "INSERT INTO server_settings (name, value, updated_at_ms) VALUES (?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET value = excluded.value, "
        "updated_at_ms = excluded.updated_at_ms",
        (name, value, at_ms),
    )
