"""The bounds of the replicas' append buffer (`run_appends`, migrations 0009 and 0014) and of
the runs waiting for their first message (`run_waits`, 0018), per client across replicas.

The rows are the shim's client messages on their way from the replica that received them to
the one holding their run: a delivery buffer, not history, so they are bounded and deleted
(docs/store.md, "What is deleted"). The caller (the transport) says the bounds; the store
checks them inside the transaction that would store the row and says which one it would pass.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import msgspec

# What storing one append came to: stored; that (request id, seqno) was stored before; or
# refused, naming the bound it would have passed (nothing stored); "full": the database is at
# its size cap and the append's run has not started; "denied": the sender is not the person
# of the run (migration 0016).
AppendOutcome = Literal[
    "stored", "duplicate", "request_full", "client_runs", "client_bytes", "full", "denied"
]


class StoredAppend(NamedTuple):
    """One stored client message of a run, and the person who sent it (None: the operator)."""

    seqno: int
    payload: bytes
    person: str | None = None


# Rows of a run never started (no `runs` row) this old are dropped by `sweep_appends`: its
# start timeout (seconds) ended it long before. Rows of a started run that never ended (every
# replica that could resume it died): after a day.
UNSTARTED_ROWS_KEPT_MS = 10 * 60 * 1000
ORPHAN_ROWS_KEPT_MS = 24 * 3600 * 1000


class AppendLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Per request id: the rows and bytes stored for it. Per client (`client` of the row):
    the request ids with rows whose run has not started (no `runs` row), and their bytes."""

    request_rows: int
    request_bytes: int
    client_runs: int
    client_bytes: int
    # How long a run whose RunSSE opened counts as waiting (`run_waits`, migration 0018): the
    # transport's unstarted timeout, past which its replica gave up on it.
    waiting_ms: int = 10_000
