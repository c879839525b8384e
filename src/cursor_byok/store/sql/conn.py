"""The connection the shared SQL jobs run on (jobs.py, rows.py, activity.py, tokens.py, links.py).

Those modules speak a portable SQL with `?` placeholders; SQLite's own connection satisfies
this protocol as it is, and the PostgreSQL backend wraps its psycopg connection in one
(postgres/conn.py) that rewrites the placeholders and adapts the values. One copy of the
compare-and-set, dedupe and record rules serves both backends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Conn(Protocol):
    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor: ...
