"""The SQL of every write job. Each runs on the writer thread inside the batch's transaction,
in a savepoint of its own: raising undoes that job alone.

Nothing here deletes a message: the history is append-only, a rewind is a view the runtime
keeps in its state bytes, and migration 0003 makes the database refuse any DELETE on `messages`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from ..api import (
    ClientOperationRecord,
    CommitResult,
    LLMCallRecord,
    Reservation,
    ReservationTotals,
    RunOutcomeRecord,
    RunRecord,
    SaveResult,
    TurnMark,
)
from ..errors import RecordMismatchError, StoreIntegrityError
from .activity import write_outcome
from .conn import Conn
from .rows import CALL_FIELDS, OP_FIELDS, current_version, find_input, get_call, get_operation
from .tokens import reservation_totals

_CALL_IMMUTABLE = ("conversation_id", "turn_id", "request", "request_hash", "messages_hash")
_CALL_MUTABLE = tuple(
    f for f in CALL_FIELDS if f not in ("call_id", "created_at_ms", *_CALL_IMMUTABLE)
)
_CALL_INSERT = (
    f"INSERT INTO llm_calls ({', '.join(CALL_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in CALL_FIELDS)})"
)


def _differs(column: str) -> str:
    """SQL true when the stored `column` and the one the statement brings differ, NULL
    included (portable: `IS DISTINCT FROM` is SQLite 3.39+, `IS NOT` SQLite's alone)."""
    old, new = f"llm_calls.{column}", f"excluded.{column}"
    return f"({old} <> {new} OR ({old} IS NULL) <> ({new} IS NULL))"


# Whether a saved record may take the one it meets: the call is not committed, the fields
# that never change are the same, and some field that may change differs (else "unchanged",
# and nothing is written). Any other case writes nothing and is told apart by reading the
# row (_settle_call); the rules are those of LLMCallRecord.
_CALL_TAKES = (
    "llm_calls.status <> 'committed' AND "
    + " AND ".join(f"llm_calls.{f} = excluded.{f}" for f in _CALL_IMMUTABLE)
    + f" AND ({' OR '.join(_differs(f) for f in _CALL_MUTABLE)})"
)
_CALL_SET = ", ".join(f"{f} = excluded.{f}" for f in _CALL_MUTABLE)
# A record saved in one statement, the row never read first: inserted when new, updated when
# _CALL_TAKES lets it.
_CALL_UPSERT = f"{_CALL_INSERT} ON CONFLICT (call_id) DO UPDATE SET {_CALL_SET} WHERE {_CALL_TAKES}"
_CALL_INSERT_NEW = f"{_CALL_INSERT} ON CONFLICT (call_id) DO NOTHING"
_CALL_UPDATE = (
    f"UPDATE llm_calls SET {', '.join(f'{f} = ?' for f in _CALL_MUTABLE)} WHERE call_id = ?"
)
_OP_IMMUTABLE = (
    "conversation_id",
    "turn_id",
    "tool_call_id",
    "tool_index",
    "tool_name",
    "side_effects",
    "request",
)
_OP_INSERT = (
    f"INSERT INTO client_operations ({', '.join(OP_FIELDS)}, created_at_ms) "
    f"VALUES ({', '.join('?' for _ in OP_FIELDS)}, ?)"
)


def commit_input(
    conn: Conn,
    path: str,
    now: int,
    conversation_id: str,
    *,
    input_id: str,
    expected_version: int,
    state: bytes,
    messages: Sequence[bytes],
    expected_message_count: int,
    result: bytes,
    calls: Sequence[LLMCallRecord],
    operations: Sequence[ClientOperationRecord],
    owner: str | None = None,
    reserve: Reservation | None = None,
    turn_marks: Sequence[TurnMark] | None = None,
    unchanged_marks: int = 0,
    run_outcome: RunOutcomeRecord | None = None,
) -> CommitResult:
    """Dedupe on the input id, check the reservation, compare-and-set on the version (and the
    message count), append the messages, record the input, upsert the records, then the rows
    that ride along: turn marks, the run's outcome (Store.commit_input)."""
    # An input already committed names a conversation that exists (input_commits' foreign
    # key), so the first commit of a new one, which inserts it, needs no look-up first: if the
    # input was committed, the insert meets the row and the look-up after it tells.
    if expected_version != 0 or expected_message_count != 0 or reserve is not None:
        previous = find_input(conn, conversation_id, input_id)
        if previous is not None:
            return CommitResult(
                status="duplicate",
                version=current_version(conn, conversation_id),
                previous=previous,
            )
    totals = None
    if reserve is not None:
        # Before anything is written, so a refusal changes nothing.
        totals = reservation_totals(conn, reserve, calls)
        if totals.refused_by is not None:
            return CommitResult(
                status="refused",
                version=current_version(conn, conversation_id),
                reservation=totals,
            )
    if expected_version == 0:
        if expected_message_count != 0:
            raise StoreIntegrityError(
                path,
                "a new conversation starts with expected_message_count=0",
                f"conversation {conversation_id!r}, got {expected_message_count}",
            )
        cur = conn.execute(
            "INSERT INTO conversations (conversation_id, version, state, message_count, "
            "created_at_ms, updated_at_ms, owner_id) VALUES (?, 1, ?, ?, ?, ?, ?) "
            "ON CONFLICT (conversation_id) DO NOTHING",
            (conversation_id, state, len(messages), now, now, owner),
        )
    else:
        cur = conn.execute(
            "UPDATE conversations SET version = version + 1, state = ?, "
            "message_count = message_count + ?, updated_at_ms = ? "
            "WHERE conversation_id = ? AND version = ? AND message_count = ?",
            (state, len(messages), now, conversation_id, expected_version, expected_message_count),
        )
    if cur.rowcount != 1:
        row = conn.execute(
            "SELECT version, message_count FROM conversations WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchone()
        if row is None or row[0] != expected_version:
            # PostgreSQL (read committed): a concurrent commit of this same input may have won
            # the compare-and-set after our first look; each statement sees the latest commits,
            # so looking again tells a duplicate from a conflict. (SQLite serializes writers:
            # there the first look already saw it.)
            previous = find_input(conn, conversation_id, input_id)
            if previous is not None:
                return CommitResult(
                    status="duplicate", version=0 if row is None else row[0], previous=previous
                )
            return CommitResult(status="conflict", version=0 if row is None else row[0])
        raise StoreIntegrityError(
            path,
            "message count mismatch: messages are append-only",
            f"conversation {conversation_id!r} at version {expected_version} has "
            f"{row[1]} messages, the commit expected {expected_message_count}",
        )
    version = expected_version + 1
    for i, body in enumerate(messages):  # one execute per row beats executemany here
        conn.execute(
            "INSERT INTO messages (conversation_id, seq, appended_version, body) "
            "VALUES (?, ?, ?, ?)",
            (conversation_id, expected_message_count + i, version, body),
        )
    conn.execute(
        "INSERT INTO input_commits (conversation_id, input_id, committed_version, "
        "result, created_at_ms) VALUES (?, ?, ?, ?, ?)",
        (conversation_id, input_id, version, result, now),
    )
    ignored: list[str] = []
    for call in calls:
        if not save_call(conn, path, call):
            ignored.append(call.call_id)
    for op in operations:
        if upsert_operation(conn, path, op, now).outcome == "ignored":
            ignored.append(op.operation_id)
    if turn_marks is not None:
        keep = min(max(unchanged_marks, 0), len(turn_marks))
        save_turn_marks(conn, conversation_id, turn_marks, keep, lambda: now)
    if run_outcome is not None:
        write_outcome(conn, run_outcome)
    return CommitResult(
        status="committed", version=version, ignored=tuple(ignored), reservation=totals
    )


def reserve_call(
    conn: Conn, path: str, record: LLMCallRecord, reserve: Reservation
) -> ReservationTotals:
    """Store.reserve_llm_call: the record saved only when `reserve` fits. A call planned again
    (resumed after a restart) counts from then: its `created_at_ms` moves to the record's.
    Its earlier row counts as it stands once finished (what its attempt cost, its place in
    the minute's rate), never its earlier reservation: this one replaces it."""
    stored = get_call(conn, record.call_id)
    totals = reservation_totals(conn, reserve, () if stored is None else (stored,))
    if totals.refused_by is not None:
        return totals
    save_call(conn, path, record)
    if stored is not None and stored.created_at_ms < record.created_at_ms:
        conn.execute(
            "UPDATE llm_calls SET created_at_ms = ? WHERE call_id = ? AND created_at_ms < ?",
            (record.created_at_ms, record.call_id, record.created_at_ms),
        )
    return totals


def upsert_call(conn: Conn, path: str, record: LLMCallRecord) -> SaveResult:
    """Store.save_llm_call: a new record in one statement; one that changes a stored call
    in two (the insert that meets the row, then the upsert that takes it), so the answer
    tells an insert from an update. The row is read only when neither wrote it."""
    values = msgspec.structs.astuple(record)
    if conn.execute(_CALL_INSERT_NEW, values).rowcount == 1:
        return _INSERTED
    if conn.execute(_CALL_UPSERT, values).rowcount == 1:
        return _UPDATED
    return _settle_call(conn, path, record)


def save_call(conn: Conn, path: str, record: LLMCallRecord) -> bool:
    """Save a record of a commit in one statement, the row not read first unless the
    statement wrote nothing (upsert_call's rules); False when the record was ignored (its
    call is committed)."""
    if conn.execute(_CALL_UPSERT, msgspec.structs.astuple(record)).rowcount == 1:
        return True
    return _settle_call(conn, path, record).outcome != "ignored"


def _settle_call(conn: Conn, path: str, record: LLMCallRecord) -> SaveResult:
    """Why the upsert of `record` wrote nothing: read the row and apply the rules."""
    stored = get_call(conn, record.call_id)
    if stored is None:  # the upsert met the row: it cannot be gone inside the transaction
        raise StoreIntegrityError(
            path, "an llm call vanished while it was saved", f"call {record.call_id!r}"
        )
    differ = [f for f in _CALL_IMMUTABLE if getattr(stored, f) != getattr(record, f)]
    if differ:
        raise _mismatch(path, "llm call", record.call_id, differ)
    if msgspec.structs.replace(record, created_at_ms=stored.created_at_ms) == stored:
        return SaveResult(outcome="unchanged")
    if stored.status == "committed":
        return SaveResult(
            outcome="ignored",
            reason=f"llm call {record.call_id!r} is committed; its record is final",
        )
    # Equal to SQL, different to Python (a value's type): written as the rules say.
    conn.execute(_CALL_UPDATE, (*(getattr(record, f) for f in _CALL_MUTABLE), record.call_id))
    return _UPDATED


_INSERTED = SaveResult(outcome="inserted")
_UPDATED = SaveResult(outcome="updated")


def upsert_operation(conn: Conn, path: str, record: ClientOperationRecord, now: int) -> SaveResult:
    stored = get_operation(conn, record.operation_id)
    if stored is None:
        conn.execute(_OP_INSERT, (*msgspec.structs.astuple(record), now))
        return SaveResult(outcome="inserted")
    differ = [f for f in _OP_IMMUTABLE if getattr(stored, f) != getattr(record, f)]
    if differ:
        raise _mismatch(path, "client operation", record.operation_id, differ)
    if stored.status == "completed":
        if record.status == "completed" and record.result == stored.result:
            return SaveResult(outcome="unchanged")
        return SaveResult(
            outcome="ignored",
            reason=f"client operation {record.operation_id!r} is completed; "
            "its result is kept forever",
        )
    if record == stored:
        return SaveResult(outcome="unchanged")
    conn.execute(
        "UPDATE client_operations SET status = ?, result = ?, updated_at_ms = ? "
        "WHERE operation_id = ?",
        (record.status, record.result, record.updated_at_ms, record.operation_id),
    )
    return SaveResult(outcome="updated")


def save_run(conn: Conn, record: RunRecord) -> SaveResult:
    row = conn.execute(
        "SELECT request FROM runs WHERE request_id = ?", (record.request_id,)
    ).fetchone()
    if row is not None:
        if bytes(row[0]) == record.request:
            return SaveResult(outcome="unchanged")
        return SaveResult(outcome="ignored", reason="another request has this id")
    conn.execute(
        "INSERT INTO runs (request_id, conversation_id, request, created_at_ms, owner_id) "
        "VALUES (?, ?, ?, ?, ?)",
        (
            record.request_id,
            record.conversation_id,
            record.request,
            record.created_at_ms,
            record.owner_id,
        ),
    )
    return SaveResult(outcome="inserted")


def save_turn_marks(
    conn: Conn,
    conversation_id: str,
    marks: Sequence[TurnMark],
    unchanged: int,
    clock: Callable[[], int],
) -> None:
    """Replace the conversation's marks, writing only those after the first `unchanged` when
    the store holds exactly that many up to the last of them (Store.save_turn_marks). An empty
    view is stored as NULL."""
    first = 0
    if unchanged:
        # The caller's marks number their turns from 1: holding exactly `unchanged` rows up
        # to the last unchanged turn means none of them was lost.
        held = conn.execute(
            "SELECT count(*) FROM turn_marks WHERE conversation_id = ? AND turn <= ?",
            (conversation_id, marks[unchanged - 1].turn),
        ).fetchone()[0]
        if held == unchanged:
            first = unchanged
    if first:
        conn.execute(
            "DELETE FROM turn_marks WHERE conversation_id = ? AND turn > ?",
            (conversation_id, marks[first - 1].turn),
        )
    else:
        conn.execute("DELETE FROM turn_marks WHERE conversation_id = ?", (conversation_id,))
    conn.executemany(
        "INSERT INTO turn_marks (conversation_id, turn, blob_id, message_count, view, "
        "created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (conversation_id, m.turn, m.blob_id, m.message_count, m.view or None, clock())
            for m in marks[first:]
        ],
    )


def append_stream_diagnostics(
    conn: Conn, call_id: str, events: Sequence[tuple[int, bytes]]
) -> None:
    conn.executemany(
        "INSERT INTO stream_diagnostics (call_id, event_index, event) VALUES (?, ?, ?) "
        "ON CONFLICT (call_id, event_index) DO NOTHING",
        [(call_id, index, event) for index, event in events],
    )


def _mismatch(path: str, kind: str, key: str, fields: Sequence[str]) -> RecordMismatchError:
    return RecordMismatchError(
        path,
        f"{kind} {key!r} was saved before with a different {', '.join(fields)}",
        "these fields never change once saved; nothing was written",
    )
