"""`token_details` (5) of a checkpoint: the context meter as the IDE reads it (reference §5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cursor_byok.loop.meter import LABELS, Category, PromptChars, measure
from cursor_byok.transport.cursor import checkpoint
from cursor_byok.transport.cursor.proto import agent_pb2 as a


def test_checkpoint_carries_the_meter_field_by_field() -> None:
    meter = measure(
        PromptChars(system_prompt=400, tools=1200, conversation=400), used=7, window=200_000
    )
    frame = a.AgentServerMessage.FromString(checkpoint([b"t1"], (), "agent", meter=meter))
    state = frame.conversation_checkpoint_update
    assert list(state.turns) == [b"t1"] and state.mode == a.AGENT_MODE_AGENT
    details = state.token_details
    assert (details.used_tokens, details.max_tokens) == (7, 200_000)
    breakdown = details.breakdown
    assert (breakdown.total_used_tokens, breakdown.max_tokens) == (7, 200_000)
    rows = [(c.id, c.label, c.estimated_tokens, c.character_count) for c in breakdown.categories]
    # estimates 100, 300, 100 of 500 → quotas 1.4, 4.2, 1.4: floors 1, 4, 1 and the leftover
    # seat to the first of the tied .4 remainders
    assert rows == [
        ("system_prompt", "System prompt", 2, 400),
        ("tools", "Tool definitions", 4, 1200),
        ("rules", "Rules", 0, 0),
        ("skills", "Skills", 0, 0),
        ("mcp", "MCP & dynamic tools", 0, 0),
        ("subagents", "Subagent definitions", 0, 0),
        ("summarized_conversation", "Summarized conversation", 0, 0),
        ("conversation", "Conversation", 1, 400),
    ]
    assert [r[1] for r in rows] == [LABELS[c] for c in Category]
    for c in breakdown.categories:
        assert c.HasField("character_count")


def test_a_checkpoint_without_a_meter_has_no_token_details() -> None:
    frame = a.AgentServerMessage.FromString(checkpoint([b"t1"]))
    assert not frame.conversation_checkpoint_update.HasField("token_details")


def test_values_past_uint32_are_clamped() -> None:
    meter = measure(PromptChars(conversation=4), used=2**33, window=2**40)
    details = a.AgentServerMessage.FromString(
        checkpoint([], (), None, meter=meter)
    ).conversation_checkpoint_update.token_details
    assert details.used_tokens == details.max_tokens == 2**32 - 1


CAPTURES = sorted(
    (Path(__file__).parents[1] / "fixtures" / "cursor").glob("ide-run-request-*.jsonl")
)


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_the_ids_and_labels_are_cursors_own(capture: Path) -> None:
    """Every category id and label, in order, as the IDE's own checkpoints carry them (the
    bytes of a real run request, not the capturer's decoded view)."""
    frame = json.loads(capture.read_text())
    message = a.AgentClientMessage.FromString(bytes.fromhex(frame["bidi_append_request"]["data"]))
    categories = message.run_request.conversation_state.token_details.breakdown.categories
    assert [(c.id, c.label) for c in categories] == [(c.value, LABELS[c]) for c in Category]
