"""The memory the transport holds for runs, counted against the server's and each client's limit.

Every run in the table costs `RUN_COST` (its session, handler task and queues) plus what it
holds: out-of-order appends waiting for a gap to fill, and its output, kept whole for a `RunSSE`
that reconnects. Counting bytes, not runs, is what keeps a few fat runs from exhausting memory
that thousands of thin ones would not. All of it counts against one server-wide budget. While
a run waits for its first message it counts against its client's allowance too: a client
cannot fill the server with runs that never begin.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .envelopes import ConnectError

MIB = 1 << 20
# What one run in the table costs before it holds anything: the RSS of a server with the
# production handler grew by 15.7-17 KiB per live run waiting for its first message (9,900 of
# them: 164 MiB), and by about 6 KiB per finished run.
RUN_COST = 16 * 1024


def size_text(n: int) -> str:
    """A byte count for people: MiB, or KiB below one MiB."""
    return f"{n / MIB:.0f} MiB" if n >= MIB else f"{n / 1024:.0f} KiB"


@functools.lru_cache(maxsize=4096)  # parsing an address costs ~12 µs of every request
def client_key(host: str | None) -> str:
    """Whose allowance a request's runs count against: its peer address; IPv6 by /64, the
    block one host usually has to itself. "" when the server did not say."""
    if not host:
        return ""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class Holder(Protocol):
    """A run as the ledger sees it (sessions.Session)."""

    @property
    def client(self) -> str: ...

    @property
    def awaiting_start(self) -> bool:
        """Neither started nor finished: what it holds counts against its client too."""
        ...

    @property
    def cost(self) -> int: ...


@dataclass(slots=True)
class _Usage:
    runs: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class LedgerLimits:
    server_bytes: int
    client_runs: int  # runs of one client waiting for their first message
    client_bytes: int  # what those runs hold


class Ledger:
    """Bytes held for runs. `reclaim(n)` is asked to free about `n` bytes (by forgetting
    finished runs) before a charge is refused."""

    def __init__(self, limits: LedgerLimits, reclaim: Callable[[int], None]) -> None:
        self.limits = limits
        self._reclaim = reclaim
        self.used = 0
        self._clients: dict[str, _Usage] = {}

    def unstarted(self, client: str) -> int:
        usage = self._clients.get(client)
        return 0 if usage is None else usage.runs

    def admit(self, client: str, *, waiting: bool = True) -> None:
        """Charge a new run of `client`; resource_exhausted when there is no room. `waiting`:
        it will wait for its first message (False: that message came with it)."""
        if not waiting:
            self._make_room(RUN_COST)
            self.used += RUN_COST
            return
        usage = self._clients.get(client) or _Usage()
        if usage.runs >= self.limits.client_runs:
            raise ConnectError(
                "resource_exhausted",
                f"this client already has {usage.runs} runs waiting for their first message "
                f"(limit {self.limits.client_runs}); send each run's request before opening more",
            )
        self._check_client(usage, RUN_COST)
        self._make_room(RUN_COST)
        self.used += RUN_COST
        usage.runs += 1
        usage.bytes += RUN_COST
        self._clients[client] = usage

    def charge(self, holder: Holder, n: int) -> None:
        """Charge `n` more bytes held by `holder`; resource_exhausted when there is no room."""
        if not holder.awaiting_start and self.used + n <= self.limits.server_bytes:
            self.used += n  # a started run's frame, with room for it: most charges
            return
        usage = self._clients.get(holder.client) if holder.awaiting_start else None
        if usage is not None:
            self._check_client(usage, n)
        self._make_room(n)
        self.used += n
        if usage is not None:
            usage.bytes += n

    def refund(self, holder: Holder, n: int) -> None:
        self.used -= n
        if holder.awaiting_start:
            self._client_less(holder.client, 0, n)

    def settled(self, holder: Holder) -> None:
        """`holder` started or finished: what it holds no longer counts against its client."""
        self._client_less(holder.client, 1, holder.cost)

    def forget(self, holder: Holder) -> None:
        """`holder` left the table: everything it held is free."""
        self.used -= holder.cost
        if holder.awaiting_start:
            self._client_less(holder.client, 1, holder.cost)

    def _client_less(self, client: str, runs: int, n: int) -> None:
        usage = self._clients.get(client)
        if usage is None:
            return
        usage.runs -= runs
        usage.bytes -= n
        if usage.runs <= 0:
            del self._clients[client]

    def _check_client(self, usage: _Usage, n: int) -> None:
        if usage.bytes + n > self.limits.client_bytes:
            raise ConnectError(
                "resource_exhausted",
                f"runs of this client that have not started would hold more than "
                f"{size_text(self.limits.client_bytes)}; send each run's request first",
            )

    def _make_room(self, n: int) -> None:
        limit = self.limits.server_bytes
        if self.used + n > limit:
            self._reclaim(self.used + n - limit)
        if self.used + n > limit:
            raise ConnectError(
                "resource_exhausted",
                f"the server is holding {size_text(self.used)} for runs in progress "
                f"(limit {size_text(limit)}); try again when some have finished",
            )
