"""The psycopg connection seen as the shared SQL jobs' connection (store/sql/conn.py).

The jobs write `?` placeholders (SQLite's); psycopg wants `%s`, so each statement is rewritten
once (cached) with every literal `%` doubled. Values are adapted both ways where the two
backends differ: a Python bool is sent as 0/1 (the schema keeps flags as integers, like SQLite),
and a NUMERIC that PostgreSQL returns for SUM over BIGINT comes back as an int (a float if it
has a fraction), which is what SQLite gives.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

import psycopg


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """`?` placeholders to psycopg's `%s` (the shared SQL has no `?` inside a literal)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _param(value: Any) -> Any:
    return int(value) if isinstance(value, bool) else value


def _value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _row(row: Any) -> Any:
    if row is None:
        return None
    return tuple(_value(v) for v in row)


class PgCursor:
    __slots__ = ("_cur",)

    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self._cur = cur

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    def fetchone(self) -> Any:
        return _row(self._cur.fetchone())

    def fetchall(self) -> list[Any]:
        return [_row(r) for r in self._cur.fetchall()]


class PgConn:
    """Satisfies store.sql.Conn over one psycopg connection (inside the caller's transaction)."""

    __slots__ = ("raw",)

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> PgCursor:
        return PgCursor(self.raw.execute(translate(sql), tuple(_param(p) for p in parameters)))

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> PgCursor:
        cur = self.raw.cursor()
        rows = [tuple(_param(p) for p in row) for row in parameters]
        if rows:
            cur.executemany(translate(sql), rows)
        return PgCursor(cur)
