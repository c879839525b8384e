"""The SQL of the replicas' append buffer (`run_appends`): store one within its bounds, read a
run's, sweep the ones nobody will read (store/appends.py says why they may be deleted).

Each function runs inside the caller's transaction (pool.py). The bounds are read and the row
written in one transaction; two transactions racing for one client may both pass its bound, so
it can be passed by at most the pool's connections per replica, never without limit.
"""

from __future__ import annotations

from ..appends import (
    ORPHAN_ROWS_KEPT_MS,
    UNSTARTED_ROWS_KEPT_MS,
    AppendLimits,
    AppendOutcome,
    StoredAppend,
)
from ..sql import Conn
from .replicas import APPENDS_CHANNEL

# The request ids of `client` waiting for their first message, this one left out: with stored
# appends, or with a RunSSE open somewhere (`run_waits`, younger than the unstarted timeout),
# and no run started; and what their stored appends hold.
_WAITING_IDS = """
SELECT w.request_id FROM (
    SELECT request_id FROM run_appends WHERE client = ?
    UNION SELECT request_id FROM run_waits WHERE client = ? AND created_at_ms >= ?
) w WHERE w.request_id <> ? AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.request_id = w.request_id)
"""
_CLIENT_WAITING = f"""
SELECT (SELECT COUNT(*) FROM ({_WAITING_IDS}) i),
       (SELECT COALESCE(SUM(a.bytes), 0) FROM run_appends a WHERE a.client = ? AND NOT EXISTS
            (SELECT 1 FROM runs r WHERE r.request_id = a.request_id))
"""
# A RunSSE opened: the run counts as waiting for its client unless it started or the client's
# bound is full, in one statement (then the stored appends are read, in the same transaction).
_OPEN = f"""
WITH s AS (SELECT EXISTS (SELECT 1 FROM runs WHERE request_id = ?) AS started),
n AS (SELECT COUNT(*) AS others FROM ({_WAITING_IDS}) i),
ins AS (
    INSERT INTO run_waits (request_id, client, created_at_ms)
    SELECT ?, ?, ? FROM s, n WHERE NOT s.started AND n.others < ?
    ON CONFLICT (request_id) DO UPDATE SET created_at_ms = EXCLUDED.created_at_ms
    RETURNING 1
)
SELECT s.started, n.others FROM s, n
"""


def publish(
    conn: Conn,
    request_id: str,
    seqno: int,
    payload: bytes,
    client: str,
    limits: AppendLimits | None,
    now_ms: int,
    *,
    full: bool = False,
    person: str | None = None,
) -> AppendOutcome:
    """Store one client message and NOTIFY every replica (the notification goes out with the
    commit), unless `person` (None: the operator, who may append to any run) is not the
    run's (`denied`: the run's owner once it started, else the person of its first stored
    append), it was stored before, a bound of `limits` would be passed, or the database is
    `full` (at its size cap) and the message's run has not started: a new run."""
    run = conn.execute("SELECT owner_id FROM runs WHERE request_id = ?", (request_id,)).fetchone()
    started = run is not None
    if person is not None:
        if started:
            owner = run[0]
        else:
            first = conn.execute(
                "SELECT person FROM run_appends WHERE request_id = ? ORDER BY seqno LIMIT 1",
                (request_id,),
            ).fetchone()
            owner = person if first is None else first[0]
        if owner != person:
            return "denied"
    known = conn.execute(
        "SELECT 1 FROM run_appends WHERE request_id = ? AND seqno = ?", (request_id, seqno)
    ).fetchone()
    if known is not None:
        return "duplicate"
    size = len(payload)
    if full and not started:
        return "full"
    if limits is not None:
        rows, held = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM run_appends WHERE request_id = ?",
            (request_id,),
        ).fetchone()
        if rows + 1 > limits.request_rows or held + size > limits.request_bytes:
            return "request_full"
        if not started:
            since = now_ms - limits.waiting_ms
            others, waiting = conn.execute(
                _CLIENT_WAITING, (client, client, since, request_id, client)
            ).fetchone()
            if others + 1 > limits.client_runs:
                return "client_runs"
            if waiting + size > limits.client_bytes:
                return "client_bytes"
    cur = conn.execute(
        "INSERT INTO run_appends "
        "(request_id, seqno, payload, created_at_ms, client, bytes, person) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id, seqno) DO NOTHING",
        (request_id, seqno, payload, now_ms, client, size, person),
    )
    if cur.rowcount != 1:
        return "duplicate"
    conn.execute("SELECT pg_notify(?, ?)", (APPENDS_CHANNEL, request_id))
    return "stored"


def open_stream(
    conn: Conn, request_id: str, client: str, limits: AppendLimits, now_ms: int
) -> tuple[AppendOutcome, tuple[StoredAppend, ...]]:
    """A RunSSE of `request_id` opened on some replica: unless its run started, it waits for
    its first message on `client`'s allowance, shared by every replica (`client_runs` when
    that is full), and the appends stored for it so far are read."""
    since = now_ms - limits.waiting_ms
    args = (request_id, client, client, since, request_id, request_id, client, now_ms)
    started, others = conn.execute(_OPEN, (*args, limits.client_runs)).fetchone()
    if not started and others + 1 > limits.client_runs:
        return "client_runs", ()
    return "stored", fetch(conn, request_id, 0)


def fetch(conn: Conn, request_id: str, from_seqno: int) -> tuple[StoredAppend, ...]:
    rows = conn.execute(
        "SELECT seqno, payload, person FROM run_appends WHERE request_id = ? AND seqno >= ? "
        "ORDER BY seqno",
        (request_id, from_seqno),
    ).fetchall()
    return tuple(StoredAppend(int(r[0]), bytes(r[1]), r[2]) for r in rows)


def forget(conn: Conn, request_id: str) -> int:
    cur = conn.execute("DELETE FROM run_appends WHERE request_id = ?", (request_id,))
    conn.execute("DELETE FROM run_waits WHERE request_id = ?", (request_id,))
    return max(cur.rowcount, 0)


def sweep(conn: Conn, now_ms: int) -> int:
    """Delete the rows nobody will read that `forget` did not (the run's replica died, or the
    run never started): of runs never started, past UNSTARTED_ROWS_KEPT_MS; of any run, past
    ORPHAN_ROWS_KEPT_MS."""
    cur = conn.execute(
        "DELETE FROM run_appends a WHERE "
        "(a.created_at_ms < ? AND NOT EXISTS "
        "    (SELECT 1 FROM runs r WHERE r.request_id = a.request_id)) "
        "OR a.created_at_ms < ?",
        (now_ms - UNSTARTED_ROWS_KEPT_MS, now_ms - ORPHAN_ROWS_KEPT_MS),
    )
    conn.execute(
        "DELETE FROM run_waits WHERE created_at_ms < ?", (now_ms - UNSTARTED_ROWS_KEPT_MS,)
    )
    return max(cur.rowcount, 0)
