"""This process's lease in the store, and the model calls of processes that stopped before
finishing them.

Every server process keeps a lease row (`ProcessLease`), renewed every `RENEW_S`, and stamps
the calls it plans or sends again with its id (`LLMCallRecord.process_id`). A "planned" call
is one in flight, and only its owner finishes it: at its answer, or when its run ends, also
at a graceful stop. A process that dies (kill -9, a crash, a power loss) leaves its calls
planned; another process finishes them, canceled with the request's estimated input and an
unknown output (records.abandoned_call), priced at the prices stored with them, once their
owner is provably gone: at its start and at every renewal. Gone means that the owner's lease
ended (it stopped), expired (nobody renewed it for `LEASE_S`), or, on this host and PID
namespace, that its pid is no longer the process that took the lease (its start time in /proc
differs: a reused pid does not pass).
A live sibling's calls are never taken, however many processes share the database (replicas,
the workers of `server.workers`): each keeps its own lease, and the store moves a dead
owner's calls to one taker only.

Calls planned before migration 0011 name no owner; they are taken as a dead process's. An
older server still running against the same database during an upgrade would lose its calls
in flight to that: stop the old processes before starting new ones (docs/store.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

import msgspec

from ...store.api import CallOwner, LLMCallRecord, ProcessLease, Store
from . import records

log = logging.getLogger("cursor_byok.runtime")

LEASE_S = 30.0  # a lease not renewed for this long is expired
RENEW_S = 5.0  # how often a process renews its lease and looks for dead owners' calls
PRUNE_AFTER_MS = 7 * 24 * 3600 * 1000  # leases that ended this long ago and own nothing go


def host_identity() -> str:
    """Where a pid names the same process: this boot and PID namespace (Linux), else the host
    name (where no pid is checked: only the lease's expiry tells)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return f"host:{socket.gethostname()}"
    return f"linux:{boot}:{namespace}"


def start_time(pid: int) -> int | None:
    """When process `pid` started, in clock ticks after boot (/proc/<pid>/stat, field 22);
    None when there is no such process, or no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:
        # The command name (field 2) is in parentheses and may hold spaces: count after it.
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def gone_because(owner: CallOwner, now_ms: int, host: str) -> str | None:
    """Why the owner of planned calls no longer runs them; None while it may."""
    lease = owner.lease
    if owner.process_id is None:
        return "made before this server kept process leases"
    if lease is None:
        return "its process left no lease"
    if lease.ended_at_ms is not None:
        return "its process stopped without finishing it"
    if lease.expires_at_ms <= now_ms:
        return "its process stopped renewing its lease"
    if lease.host == host and lease.pid_started and start_time(lease.pid) != lease.pid_started:
        return f"its process (pid {lease.pid}) is gone"
    return None


class ProcessLeases:
    """This process's lease, and the taking over of dead processes' calls."""

    def __init__(
        self,
        store: Store,
        process_id: str,
        *,
        now_ms: Callable[[], int],
        on_llm_call: Callable[[LLMCallRecord], None] | None = None,
        lease_s: float = LEASE_S,
        renew_s: float = RENEW_S,
    ) -> None:
        self.store = store
        self.process_id = process_id
        self._now_ms = now_ms
        self._on_llm_call = on_llm_call
        self._lease_s = lease_s
        self._renew_s = renew_s
        self.host = host_identity()
        pid = os.getpid()
        self._lease = ProcessLease(
            process_id=process_id,
            host=self.host,
            pid=pid,
            pid_started=start_time(pid) or 0,
            started_at_ms=now_ms(),
            renewed_at_ms=0,
            expires_at_ms=0,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Take the lease, finish the calls of processes gone before this one, keep it."""
        await self.renew()
        await self.sweep()
        await self.store.prune_leases(self._now_ms() - PRUNE_AFTER_MS)
        self._task = asyncio.get_running_loop().create_task(self._keep())

    async def renew(self) -> None:
        now = self._now_ms()
        self._lease = msgspec.structs.replace(
            self._lease, renewed_at_ms=now, expires_at_ms=now + int(self._lease_s * 1000)
        )
        await self.store.save_lease(self._lease)

    async def sweep(self) -> list[LLMCallRecord]:
        """Finish the planned calls of every owner gone (not this process, never one alive);
        their records as saved."""
        now = self._now_ms()
        done: list[LLMCallRecord] = []
        for owner in await self.store.planned_call_owners():
            if owner.process_id == self.process_id:
                continue
            why = gone_because(owner, now, self.host)
            if why is None:
                continue
            taken = await self.store.take_planned_calls(self.process_id, [owner.process_id])
            for record in taken:
                reason = f"the server process that made the call stopped before it ended ({why})"
                finished = records.abandoned_call(record, reason, now_ms=self._now_ms())
                await self.store.save_llm_call(finished)
                done.append(finished)
                if self._on_llm_call is not None:
                    try:
                        self._on_llm_call(finished)
                    except Exception:
                        log.exception("metrics: could not count a call")
            if taken:
                log.warning(
                    "finished %d model call(s) left in flight by process %s (%s): canceled, "
                    "their input tokens estimated",
                    len(taken),
                    owner.process_id or "(none)",
                    why,
                )
        return done

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self._renew_s)
            try:
                await self.renew()
                await self.sweep()
            except Exception as exc:  # the store is down: the next renewal tries again
                log.warning("could not renew this process's lease: %s", exc)

    async def stop(self) -> None:
        """A graceful stop: this process's calls are finished; its lease ends now."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        now = self._now_ms()
        self._lease = msgspec.structs.replace(self._lease, renewed_at_ms=now, ended_at_ms=now)
        await self.store.save_lease(self._lease)


__all__ = ["LEASE_S", "RENEW_S", "ProcessLeases", "gone_because", "host_identity", "start_time"]
