"""What server processes sharing one database server relay besides its rows (store.api
re-exports these protocols): conversation claims and holds, and the shim's client messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .appends import AppendLimits, AppendOutcome, StoredAppend


class ConversationClaims(Protocol):
    """Relays "a run took this conversation" between server processes that share a database
    server (PostgreSQL: NOTIFY on one connection, LISTEN on another). It only carries the
    message; what a holder does on hearing it is the runtime's to decide. SQLite has none:
    there the version compare-and-set alone decides between processes."""

    async def announce_claim(self, conversation_id: str, claimant: str) -> None:
        """Tell every listening process (this one included) that `claimant` took it."""
        ...

    async def watch_claims(self, on_claim: Callable[[str, str], None]) -> None:
        """Start calling `on_claim(conversation_id, claimant)` on the caller's event loop for
        each claim announced from now on, until the store is closed."""
        ...

    async def hold_conversation(self, conversation_id: str) -> bool:
        """Try once to take this process's hold on the conversation (PostgreSQL: a
        session-level advisory lock on a connection of its own, so a process that dies lets
        go with its connection). False: another process holds it."""
        ...

    async def release_conversation(self, conversation_id: str) -> None:
        """Let go of the hold taken by `hold_conversation` (nothing when not held)."""
        ...


class Replicas(ConversationClaims, Protocol):
    """A store's replica support (`Store.replicas`): the claims above, and the shim's client
    messages relayed to the replica that serves their run (transport/connect/relay.py)."""

    async def publish_append(
        self,
        request_id: str,
        seqno: int,
        payload: bytes,
        client: str = "",
        limits: AppendLimits | None = None,
        person: str | None = None,
    ) -> AppendOutcome:
        """Store one client message of a run, within `limits`, and tell every replica;
        `denied` when `person` (None: the operator) is not the run's."""
        ...

    async def open_stream(
        self, request_id: str, client: str, limits: AppendLimits
    ) -> tuple[AppendOutcome, tuple[StoredAppend, ...]]:
        """A RunSSE opened: count the run as waiting on `client`'s allowance across replicas
        unless it started (`client_runs`: the allowance is full), and read its stored appends."""
        ...

    async def fetch_appends(self, request_id: str, from_seqno: int) -> tuple[StoredAppend, ...]:
        """The run's stored client messages from `from_seqno` on, in order, with who sent
        each."""
        ...

    async def forget_appends(self, request_id: str) -> int:
        """Delete the run's stored client messages (its run ended)."""
        ...

    async def sweep_appends(self) -> int:
        """Delete the stored client messages nobody will read."""
        ...

    async def watch_appends(
        self, on_append: Callable[[str], None], on_reconnect: Callable[[], None] | None = None
    ) -> None:
        """Call `on_append(request_id)` for each append stored by any replica from now on."""
        ...

    async def find_run(self, request_id: str) -> object | None:
        """The stored run request of `request_id` (Store.find_run's RunRecord)."""
        ...
