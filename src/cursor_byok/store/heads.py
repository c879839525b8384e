"""A conversation's head (its version and size, no state or messages) and a run's first look
at its conversation (the head and, for one the store does not hold, its clone note)."""

from __future__ import annotations

import msgspec


class ConversationSummary(msgspec.Struct, frozen=True, kw_only=True):
    conversation_id: str
    version: int
    message_count: int
    created_at_ms: int
    updated_at_ms: int
    owner_id: str | None = None  # as ConversationRecord.owner_id


class FirstLook(msgspec.Struct, frozen=True, kw_only=True):
    """What Store.first_look finds: the conversation's head, and the conversation its clone
    note names (None: no note), in one read."""

    head: ConversationSummary | None
    clone_source: str | None = None
