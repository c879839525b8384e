"""The SQL of every read, and the decoders from rows to records.

Each function takes the connection it runs on: a reader's (inline or pooled) or the writer's
inside a job (a commit looks up its input id and the records it upserts). Nothing here opens,
commits or decides; bytes come back as they were stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..api import (
    ClientOperationRecord,
    ConversationRecord,
    ConversationSummary,
    FirstLook,
    InputCommit,
    LLMCallRecord,
    RunRecord,
    TurnMark,
)
from ..errors import StoreCorruptError
from .conn import Conn

CALL_FIELDS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(LLMCallRecord))
CALL_SELECT = f"SELECT {', '.join(CALL_FIELDS)} FROM llm_calls"
OP_FIELDS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(ClientOperationRecord))
OP_SELECT = f"SELECT {', '.join(OP_FIELDS)} FROM client_operations"
_SUMMARY_COLUMNS = "conversation_id, version, message_count, created_at_ms, updated_at_ms, owner_id"


class TooLarge(Exception):
    """Raised by an inline read that found more than it should read on the caller's thread:
    the read is done again on a reader thread."""


def load_conversation(
    conn: Conn, path: str, conversation_id: str, max_messages: int | None = None
) -> ConversationRecord | None:
    """The conversation with every message it ever appended, in order. Raises TooLarge when it
    holds more than `max_messages`, StoreCorruptError when rows are missing. Run it inside one
    read transaction: the conversation row and its messages must come from one snapshot."""
    row = conn.execute(
        "SELECT version, state, message_count, created_at_ms, updated_at_ms, owner_id "
        "FROM conversations WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()
    if row is None:
        return None
    if max_messages is not None and row[2] > max_messages:
        raise TooLarge()
    bodies = conn.execute(
        "SELECT body FROM messages WHERE conversation_id = ? ORDER BY seq",
        (conversation_id,),
    ).fetchall()
    if len(bodies) != row[2]:
        raise StoreCorruptError(
            path,
            "message history does not match the conversation",
            f"conversation {conversation_id!r} records {row[2]} messages, found {len(bodies)}",
        )
    return ConversationRecord(
        conversation_id=conversation_id,
        version=row[0],
        state=row[1],
        messages=tuple(b[0] for b in bodies),
        created_at_ms=row[3],
        updated_at_ms=row[4],
        owner_id=row[5],
    )


def head(conn: Conn, conversation_id: str) -> ConversationSummary | None:
    row = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} FROM conversations WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()
    return None if row is None else _summary_from_row(row)


_FIRST_LOOK = (
    "SELECT "
    + ", ".join(f"c.{c}" for c in _SUMMARY_COLUMNS.split(", "))
    + ", n.source_conversation_id FROM (SELECT CAST(? AS TEXT) AS id) AS k "
    "LEFT JOIN conversations AS c ON c.conversation_id = k.id "
    "LEFT JOIN clone_notes AS n ON n.conversation_id = k.id"
)


def first_look(conn: Conn, conversation_id: str) -> FirstLook:
    """head and the clone note (links.clone_source) in one statement (Store.first_look)."""
    row = conn.execute(_FIRST_LOOK, (conversation_id,)).fetchone()
    summary = None if row[0] is None else _summary_from_row(row)
    return FirstLook(head=summary, clone_source=None if row[6] is None else str(row[6]))


def list_conversations(conn: Conn, limit: int) -> tuple[ConversationSummary, ...]:
    rows = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} FROM conversations "
        "ORDER BY updated_at_ms DESC, conversation_id LIMIT ?",
        (limit,),
    ).fetchall()
    return tuple(_summary_from_row(r) for r in rows)


def current_version(conn: Conn, conversation_id: str) -> int:
    """The conversation's version, 0 when there is no such conversation."""
    row = conn.execute(
        "SELECT version FROM conversations WHERE conversation_id = ?", (conversation_id,)
    ).fetchone()
    return 0 if row is None else int(row[0])


def find_input(conn: Conn, conversation_id: str, input_id: str) -> InputCommit | None:
    row = conn.execute(
        "SELECT committed_version, result, created_at_ms FROM input_commits "
        "WHERE conversation_id = ? AND input_id = ?",
        (conversation_id, input_id),
    ).fetchone()
    if row is None:
        return None
    return InputCommit(
        conversation_id=conversation_id,
        input_id=input_id,
        committed_version=row[0],
        result=row[1],
        created_at_ms=row[2],
    )


def get_call(conn: Conn, call_id: str) -> LLMCallRecord | None:
    row = conn.execute(f"{CALL_SELECT} WHERE call_id = ?", (call_id,)).fetchone()
    return None if row is None else _call_from_row(row)


def get_operation(conn: Conn, operation_id: str) -> ClientOperationRecord | None:
    row = conn.execute(f"{OP_SELECT} WHERE operation_id = ?", (operation_id,)).fetchone()
    if row is None:
        return None
    values = dict(zip(OP_FIELDS, row, strict=True))
    values["side_effects"] = bool(values["side_effects"])
    return ClientOperationRecord(**values)


def find_run(conn: Conn, request_id: str) -> RunRecord | None:
    row = conn.execute(
        "SELECT request_id, conversation_id, request, created_at_ms, owner_id FROM runs "
        "WHERE request_id = ?",
        (request_id,),
    ).fetchone()
    if row is None:
        return None
    return RunRecord(
        request_id=row[0],
        conversation_id=row[1],
        request=bytes(row[2]),
        created_at_ms=row[3],
        owner_id=row[4],
    )


def list_turn_marks(conn: Conn, conversation_id: str) -> tuple[TurnMark, ...]:
    """The marks in turn order. A NULL view (no view given, or a mark written before
    migration 0003) comes back as b""."""
    rows = conn.execute(
        "SELECT turn, blob_id, message_count, view FROM turn_marks WHERE conversation_id = ? "
        "ORDER BY turn",
        (conversation_id,),
    ).fetchall()
    return tuple(
        TurnMark(
            conversation_id=conversation_id,
            turn=r[0],
            blob_id=bytes(r[1]),
            message_count=r[2],
            view=b"" if r[3] is None else bytes(r[3]),
        )
        for r in rows
    )


def list_stream_diagnostics(conn: Conn, call_id: str) -> tuple[tuple[int, bytes], ...]:
    rows = conn.execute(
        "SELECT event_index, event FROM stream_diagnostics WHERE call_id = ? ORDER BY event_index",
        (call_id,),
    ).fetchall()
    return tuple((int(r[0]), bytes(r[1])) for r in rows)


def _summary_from_row(row: Sequence[Any]) -> ConversationSummary:
    return ConversationSummary(
        conversation_id=row[0],
        version=row[1],
        message_count=row[2],
        created_at_ms=row[3],
        updated_at_ms=row[4],
        owner_id=row[5],
    )


def _call_from_row(row: Sequence[Any]) -> LLMCallRecord:
    return LLMCallRecord(**dict(zip(CALL_FIELDS, row, strict=True)))
