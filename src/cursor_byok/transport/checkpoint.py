"""Conversation checkpoints the server publishes, and the blob replies they depend on."""

from __future__ import annotations

from collections.abc import Sequence

from .dialect import ClientEvent, KvReply
from .cursor.proto import agent_pb2


def set_blob_ok(reply: ClientEvent) -> bool:
    """A set_blob_result without an error: the client stored the blob."""
    if not isinstance(reply, KvReply):
        return False
    m = reply.message
    return m.WhichOneof("message") == "set_blob_result" and not m.set_blob_result.HasField("error")


def checkpoint(turn_blob_ids: Sequence[bytes]) -> agent_pb2.AgentServerMessage:
    """`conversation_checkpoint_update` listing one blob per completed turn."""
    return agent_pb2.AgentServerMessage(
        conversation_checkpoint_update=agent_pb2.ConversationStateStructure(
            turns=list(turn_blob_ids)
        )
    )
