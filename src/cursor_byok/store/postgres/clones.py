"""The PostgreSQL store's clone notes (NotifyConversationClone, migration 0017): a base class
of PostgresStore, which supplies `_run`, as signals.py is."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..api import FirstLook, SaveResult
from ..sql import Conn, links, rows

T = TypeVar("T")


class CloneNotes:
    """Which conversation a clone was made from, in the database every replica reads."""

    async def _run(
        self,
        fn: Callable[[Conn], T],
        what: str,
        *,
        write: bool,
        durable: bool = True,
        snapshot: bool = False,
    ) -> T:
        raise NotImplementedError

    async def note_clone(self, conversation_id: str, source: str, at_ms: int) -> SaveResult:
        return await self._run(
            lambda conn: links.note_clone(conn, conversation_id, source, at_ms),
            f"noting {conversation_id!r} as a clone",
            write=True,
            durable=False,
        )

    async def clone_source(self, conversation_id: str) -> str | None:
        return await self._run(
            lambda conn: links.clone_source(conn, conversation_id),
            f"reading the clone note of {conversation_id!r}",
            write=False,
        )

    async def first_look(self, conversation_id: str) -> FirstLook:
        return await self._run(
            lambda conn: rows.first_look(conn, conversation_id),
            f"reading conversation {conversation_id!r}",
            write=False,
        )
