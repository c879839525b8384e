"""The runner's in-memory copies of committed states: used only while the store's head says
the copy is what it holds, bounded in bytes."""

from __future__ import annotations

import msgspec

from cursor_byok.llm.types import UserMessage
from cursor_byok.loop.state import ConversationState
from cursor_byok.store.api import ConversationSummary, TurnMark
from cursor_byok.transport.runtime.committed_states import CommittedStates, memory_cost
from cursor_byok.transport.runtime.turn_ids import TurnIds


def state(conversation_id: str, n: int) -> ConversationState:
    messages = tuple(UserMessage.of_text(f"{conversation_id} {i}") for i in range(n))
    return msgspec.structs.replace(
        ConversationState.new(conversation_id), messages=messages, log=messages
    )


def head(conversation_id: str, version: int, count: int) -> ConversationSummary:
    return ConversationSummary(
        conversation_id=conversation_id,
        version=version,
        message_count=count,
        created_at_ms=0,
        updated_at_ms=0,
    )


def test_a_kept_state_is_used_only_at_its_version() -> None:
    states = CommittedStates()
    s3 = state("c", 3)
    states.remember("c", 7, s3, 100)
    assert states.get("c", head("c", 7, 3)) == (s3, 7)
    assert states.get("c", head("c", 8, 5)) is None  # another writer moved it
    assert len(states) == 0 and states.size == 0  # ... and the stale copy is dropped
    assert states.get("other", head("other", 1, 0)) is None


def test_a_count_that_differs_at_the_same_version_is_not_trusted() -> None:
    states = CommittedStates()
    states.remember("c", 7, state("c", 3), 100)
    assert states.get("c", head("c", 7, 4)) is None


def test_advance_follows_commits_from_the_kept_version_only() -> None:
    states = CommittedStates()
    states.remember("c", 0, state("c", 0), 0)  # a new conversation
    s2 = state("c", 2)
    states.advance("c", 0, 1, s2, 40)
    assert states.get("c", head("c", 1, 2)) == (s2, 1) and states.size == memory_cost(40)
    s4 = state("c", 4)
    states.advance("c", 1, 2, s4, 60)
    assert states.get("c", head("c", 2, 4)) == (s4, 2) and states.size == memory_cost(100)
    # a commit from a version this copy is not at: its size is unknown, nothing is kept
    states.advance("c", 5, 6, state("c", 6), 10)
    assert len(states) == 0 and states.size == 0
    states.advance("never-seen", 3, 4, state("never-seen", 1), 10)
    assert len(states) == 0


def test_bounded_in_bytes_least_recently_used_first() -> None:
    states = CommittedStates(max_bytes=memory_cost(100) * 5 // 2)  # two entries fit
    for name in ("a", "b", "c"):
        states.remember(name, 1, state(name, 1), 100)
    assert states.get("a", head("a", 1, 1)) is None  # dropped first
    assert states.get("b", head("b", 1, 1)) is not None  # now the most recent
    states.remember("d", 1, state("d", 1), 100)
    assert states.get("c", head("c", 1, 1)) is None
    assert states.get("b", head("b", 1, 1)) is not None and states.size == 2 * memory_cost(100)
    states.remember("e", 1, state("e", 1), 10_000)  # larger than the budget: kept alone
    assert len(states) == 1 and states.get("e", head("e", 1, 1)) is not None
    states.forget("e")
    assert len(states) == 0 and states.size == 0


def test_turn_marks_ride_along_at_their_version() -> None:
    states = CommittedStates()
    mark = TurnMark(conversation_id="c", turn=1, blob_id=b"b" * 32, message_count=2)
    assert states.turn_marks("c", 1) is None  # nothing kept
    states.remember("c", 1, state("c", 2), 10)
    assert states.turn_marks("c", 1) is None  # kept state, marks not known yet
    states.set_turn_marks("c", 1, [mark])
    assert states.turn_marks("c", 1) == [mark]
    assert states.turn_marks("c", 2) is None  # another version: not these
    states.set_turn_marks("c", 5, [])  # for a version not kept: ignored
    assert states.turn_marks("c", 1) == [mark]
    states.advance("c", 1, 2, state("c", 4), 10)  # a commit of this process keeps them
    assert states.turn_marks("c", 2) == [mark]
    states.remember("c", 3, state("c", 6), 30)  # loaded again: not known until read
    assert states.turn_marks("c", 3) is None


def test_the_decoded_marks_ride_along_with_their_marks_only() -> None:
    """A run takes the marks' decoded views from here instead of decoding every mark again:
    only at the version of the marks they were set with, and never after marks set
    without them (issue 28: 24 -> 474 decodes a turn at 1,800 messages)."""
    states = CommittedStates()
    mark = TurnMark(conversation_id="c", turn=1, blob_id=b"b" * 32, message_count=2)
    recorded = {1: ((), b"b" * 32)}
    states.remember("c", 1, state("c", 2), 10)
    assert states.recorded("c", 1) is None
    states.set_turn_marks("c", 1, [mark], recorded)
    assert states.recorded("c", 1) is recorded
    assert states.recorded("c", 2) is None  # another version: not these
    states.advance("c", 1, 2, state("c", 4), 10)  # a commit of this process keeps them
    assert states.recorded("c", 2) is recorded and states.turn_marks("c", 2) == [mark]
    states.set_turn_marks("c", 2, [mark])  # marks read from the store: not decoded here
    assert states.recorded("c", 2) is None
    states.set_turn_marks("c", 2, [mark], recorded)
    states.remember("c", 3, state("c", 6), 30)  # loaded again: not known until read
    assert states.recorded("c", 3) is None


def test_the_turn_ids_memo_rides_along_across_commits() -> None:
    states = CommittedStates()
    memo = TurnIds(ends=(), ids=(), last_blob=b"")
    states.set_turn_ids("c", memo)  # nothing kept: ignored
    assert states.turn_ids("c") is None
    states.remember("c", 1, state("c", 2), 10)
    states.set_turn_ids("c", memo)
    states.advance("c", 1, 2, state("c", 4), 10)  # the next turn's run finds it
    assert states.turn_ids("c") is memo
    states.forget("c")
    assert states.turn_ids("c") is None
