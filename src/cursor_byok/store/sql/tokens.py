"""The SQL of the tokens per person (migration 0007) and of the usage made under each.

Plain SQL a second backend can run as it is (only the `?` placeholders differ): no pragma,
no SQLite function. The store decides nothing: whether a token may call a model is the
runtime's to say (transport/runtime/access.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..api import AccessTokenRecord, SaveResult, TokenUsage
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
)
_SELECT = f"SELECT {', '.join(_FIELDS)} FROM access_tokens"
_FINAL = "('committed', 'failed', 'canceled')"
_USAGE = f"""
SELECT token_id, COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
       COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0),
       COALESCE(SUM(cost_usd), 0.0),
       COALESCE(SUM(CASE WHEN status IN {_FINAL} AND cost_usd IS NULL THEN 1 ELSE 0 END), 0)
FROM llm_calls
WHERE token_id IS NOT NULL AND created_at_ms >= ? AND created_at_ms < ?
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
        ),
    )
    return SaveResult(outcome="inserted")


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


_SPEND = (
    "SELECT COALESCE(SUM(cost_usd), 0.0) FROM llm_calls "
    "WHERE token_id = ? AND created_at_ms >= ? AND created_at_ms < ?"
)


def spend(conn: Conn, token_id: str, since_ms: int, until_ms: int) -> float:
    return float(conn.execute(_SPEND, (token_id, since_ms, until_ms)).fetchone()[0])


def usage(conn: Conn, since_ms: int, until_ms: int, token_id: str | None) -> tuple[TokenUsage, ...]:
    sql, args = _USAGE, list[object]([since_ms, until_ms])
    if token_id is not None:
        sql += " AND token_id = ?"
        args.append(token_id)
    rows = conn.execute(sql + " GROUP BY token_id ORDER BY token_id", args).fetchall()
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
