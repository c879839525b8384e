"""`messages_hash` continues from the kept hash of a history it extends: the same digest as
hashing everything, for any sequence of histories, and only the new messages encoded."""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.llm import canonical, prefix_memo
from cursor_byok.llm.canonical import encode_message, messages_hash
from cursor_byok.llm.types import AssistantMessage, Message, ToolCall, UserMessage
from tests.llm.strategies import messages


def full_hash(history: Sequence[Message]) -> str:
    return hashlib.sha256(b"".join(encode_message(m) + b"\n" for m in history)).hexdigest()


@pytest.fixture(autouse=True)
def empty_memo() -> Iterator[None]:
    canonical._prefix_hashes.clear()
    yield
    canonical._prefix_hashes.clear()


# Each step: which history to continue (by index, modulo the count), how many of its messages
# to keep (a fork keeps fewer), and what to append.
steps = st.lists(
    st.tuples(st.integers(0, 7), st.integers(0, 8), st.lists(messages, max_size=3)),
    min_size=1,
    max_size=12,
)


@given(steps)
def test_any_sequence_of_histories_hashes_as_a_whole(plan: list) -> None:  # type: ignore[type-arg]
    canonical._prefix_hashes.clear()
    histories: list[tuple[Message, ...]] = [()]
    for which, keep, more in plan:
        base = histories[which % len(histories)]
        history = base[: min(keep, len(base))] + tuple(more)
        assert messages_hash(history) == full_hash(history)
        assert messages_hash(list(history)) == full_hash(history)  # any iterable
        histories.append(history)
    for history in histories:  # every one again, in an order unlike the first
        assert messages_hash(history) == full_hash(history)


def test_only_the_appended_messages_are_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    history = tuple(UserMessage.of_text(f"message {i}") for i in range(50))
    messages_hash(history)
    encoded: list[Message] = []

    def counting(message: Message) -> bytes:
        encoded.append(message)
        return encode_message(message)

    monkeypatch.setattr(canonical, "encode_message", counting)
    longer = (*history, UserMessage.of_text("new"))
    assert messages_hash(longer) == full_hash(longer)
    assert encoded == [longer[-1]]
    encoded.clear()
    assert messages_hash(longer) == full_hash(longer)  # the same history again: nothing
    assert encoded == []


def test_equal_but_not_identical_messages_are_hashed_again() -> None:
    """A hit needs the very same objects: 1 and 1.0 are equal and encode differently."""
    call = lambda value: AssistantMessage(  # noqa: E731
        content=(ToolCall(id="c", name="Read", arguments={"limit": value}),),
        api="x",
        provider="p",
        model="m",
    )
    last = UserMessage.of_text("the same object ends both histories")
    as_int, as_float = (call(1), last), (call(1.0), last)
    assert as_int == as_float
    assert messages_hash(as_int) == full_hash(as_int)
    assert messages_hash(as_float) == full_hash(as_float) != full_hash(as_int)


def test_kept_histories_are_bounded() -> None:
    for i in range(canonical.PREFIX_HASHES_MAX * 3):
        history = (UserMessage.of_text(f"conversation {i}"),)
        assert messages_hash(history) == full_hash(history)
    assert len(canonical._prefix_hashes) == canonical.PREFIX_HASHES_MAX


def test_extending_replaces_the_shorter_history() -> None:
    history: tuple[Message, ...] = ()
    for i in range(20):
        history += (UserMessage.of_text(f"turn {i}"),)
        messages_hash(history)
    assert len(canonical._prefix_hashes) == 1


def test_a_pair_of_histories_is_scanned_once_for_every_memo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The memos of one call (the adapter's, the hash's, the meter's) are asked about the same
    two histories: the identity scan runs once for the pair, not once per memo."""
    base = tuple(UserMessage.of_text(f"m{k}") for k in range(50))
    longer = (*base, UserMessage.of_text("new"))
    memos: list[prefix_memo.PrefixMemo[Any]] = [prefix_memo.PrefixMemo() for _ in range(3)]
    for memo in memos:
        memo.keep(base, None, _Copyable(), extended_from=0)
    compared = 0
    real_is = operator.is_

    def counting_is(a: object, b: object) -> bool:
        nonlocal compared
        compared += 1
        return real_is(a, b)

    monkeypatch.setattr(prefix_memo, "operator", SimpleNamespace(is_=counting_is))
    for memo in memos:
        resumed = memo.resume(longer, None)
        assert resumed is not None and resumed[1] == len(base)
    assert compared == len(base)
    # equal but other objects before the kept last one: scanned, not taken for the pair
    other = (*(UserMessage.of_text(f"m{k}") for k in range(49)), base[-1], longer[-1])
    assert all(memo.resume(other, None) is None for memo in memos)


class _Copyable:
    def copy(self) -> _Copyable:
        return self
