"""The SQL of the links between conversations: subagent links (migration 0008, parent Task
call → child conversation) and clone notes (0017, a cloned conversation → its source)."""

from __future__ import annotations

from ..api import SaveResult, SubagentLink
from .conn import Conn

_FIELDS = (
    "parent_conversation_id, parent_tool_call_id, child_conversation_id, subagent_type, "
    "depth, created_at_ms"
)


def save_link(conn: Conn, link: SubagentLink) -> SaveResult:
    """The first link of a parent call wins: a second child for the same call is never
    recorded (it would mean a second child was started)."""
    row = conn.execute(
        "SELECT child_conversation_id FROM subagent_links "
        "WHERE parent_conversation_id = ? AND parent_tool_call_id = ?",
        (link.parent_conversation_id, link.parent_tool_call_id),
    ).fetchone()
    if row is not None:
        if row[0] == link.child_conversation_id:
            return SaveResult(outcome="unchanged")
        return SaveResult(outcome="ignored", reason="that call already has a child")
    conn.execute(
        f"INSERT INTO subagent_links ({_FIELDS}) VALUES (?, ?, ?, ?, ?, ?)",
        (
            link.parent_conversation_id,
            link.parent_tool_call_id,
            link.child_conversation_id,
            link.subagent_type,
            link.depth,
            link.created_at_ms,
        ),
    )
    return SaveResult(outcome="inserted")


def _link(row: tuple[str, str, str, str, int, int]) -> SubagentLink:
    return SubagentLink(
        parent_conversation_id=row[0],
        parent_tool_call_id=row[1],
        child_conversation_id=row[2],
        subagent_type=row[3],
        depth=row[4],
        created_at_ms=row[5],
    )


def find_link(conn: Conn, parent_conversation_id: str, tool_call_id: str) -> SubagentLink | None:
    row = conn.execute(
        f"SELECT {_FIELDS} FROM subagent_links "
        "WHERE parent_conversation_id = ? AND parent_tool_call_id = ?",
        (parent_conversation_id, tool_call_id),
    ).fetchone()
    return _link(row) if row is not None else None


def list_links(conn: Conn, parent_conversation_id: str) -> tuple[SubagentLink, ...]:
    rows = conn.execute(
        f"SELECT {_FIELDS} FROM subagent_links WHERE parent_conversation_id = ? "
        "ORDER BY created_at_ms, parent_tool_call_id",
        (parent_conversation_id,),
    ).fetchall()
    return tuple(_link(r) for r in rows)


def note_clone(
    conn: Conn, conversation_id: str, source_conversation_id: str, at_ms: int
) -> SaveResult:
    """NotifyConversationClone's note (migration 0017): the first note of a conversation wins."""
    row = conn.execute(
        "SELECT source_conversation_id FROM clone_notes WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()
    if row is not None:
        if row[0] == source_conversation_id:
            return SaveResult(outcome="unchanged")
        return SaveResult(outcome="ignored", reason="that conversation was noted as a clone")
    conn.execute(
        "INSERT INTO clone_notes (conversation_id, source_conversation_id, created_at_ms) "
        "VALUES (?, ?, ?) ON CONFLICT (conversation_id) DO NOTHING",
        (conversation_id, source_conversation_id, at_ms),
    )
    return SaveResult(outcome="inserted")


def clone_source(conn: Conn, conversation_id: str) -> str | None:
    row = conn.execute(
        "SELECT source_conversation_id FROM clone_notes WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()
    return str(row[0]) if row is not None else None
