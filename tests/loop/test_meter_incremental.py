"""`prompt_chars` over a growing history counts only what was appended (issue 28, point 3),
and always gives what counting every message gives."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm.prefix_memo import PrefixMemo
from cursor_byok.llm.types import (
    AssistantMessage,
    ImageContent,
    Message,
    RequestMessages,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from cursor_byok.loop import meter
from cursor_byok.loop.context import TurnContext
from cursor_byok.loop.meter import prompt_chars

CONTEXT = TurnContext()


def _message(i: int, kind: int) -> Message:
    if kind == 0:
        return UserMessage(content=(TextContent(text="u" * (i % 7 + 1)),))
    if kind == 1:
        call = ToolCall(id=f"c{i}", name="Read", arguments={"path": "/a" * (i % 5)})
        return AssistantMessage(
            content=(TextContent(text="a" * i), call), api="openai-chat", provider="p", model="m"
        )
    if kind == 2:
        return ToolResultMessage(
            tool_call_id=f"c{i}", tool_name="Read", content=(TextContent(text="r" * 1024),)
        )
    image = ImageContent(data="AA==", mime_type="image/png")
    return UserMessage(content=(TextContent(text="look"), image))


def _request(messages: tuple[Message, ...]) -> RequestMessages:
    return RequestMessages(system_prompt="sys", messages=messages)


def _fresh(messages: tuple[Message, ...], split: int) -> meter.PromptChars:
    """Every message counted (an empty memo of its own; the shared one is left as it was)."""
    with mock.patch.object(meter, "_counts", PrefixMemo()):
        return prompt_chars(_request(messages), CONTEXT, summary_messages=split)


def test_each_call_counts_only_the_messages_appended_since_the_last() -> None:
    meter._counts.clear()
    history: tuple[Message, ...] = ()
    counted: list[int] = []
    original = meter._Count.message

    def counting(self: meter._Count, message: Message) -> None:
        counted.append(1)
        original(self, message)

    with mock.patch.object(meter._Count, "message", counting):
        for turn in range(50):
            history = (*history, _message(turn, 0), _message(turn, 1), _message(turn, 2))
            counted.clear()
            prompt_chars(_request(history), CONTEXT)
            assert len(counted) == 3, (turn, len(counted))


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.integers(0, 3), min_size=1, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    split=st.integers(0, 5),
)
def test_resumed_counts_equal_a_full_count(kinds: list[int], cuts: list[int], split: int) -> None:
    messages = tuple(_message(i, k) for i, k in enumerate(kinds))
    meter._counts.clear()
    # grow in steps (the memo resumes), and go back to a shorter prefix (a rewind) in between
    for end in [*sorted(c % (len(messages) + 1) for c in cuts), len(messages)]:
        prefix = messages[:end]
        got = prompt_chars(_request(prefix), CONTEXT, summary_messages=split)
        assert got == _fresh(prefix, split) or not prefix
    # an equal but distinct message is counted afresh, never taken for the memo's
    other = (*messages[:-1], _message(len(messages) + 3, 2))
    assert prompt_chars(_request(other), CONTEXT, summary_messages=split) == _fresh(other, split)
