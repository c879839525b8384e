"""A run's system prompt and tools are rendered once per context object (loop/memo.py), and
what a hit returns is what rendering gives."""

from __future__ import annotations

from unittest import mock

import msgspec

from cursor_byok.loop import compaction, meter, prompt
from cursor_byok.loop.context import TurnContext
from cursor_byok.loop.memo import ByIdentity


def test_one_context_renders_its_tools_and_prompt_once() -> None:
    context = TurnContext(mode="agent", custom_instructions="be brief")
    with (
        mock.patch.object(prompt, "_tools", ByIdentity(prompt._render_tools)),
        mock.patch.object(prompt, "_prompts", ByIdentity(prompt._render_prompt)),
        mock.patch.object(prompt, "offered", wraps=prompt.offered) as offered,
    ):
        first = prompt.render_tools(context)
        assert prompt.render_tools(context) is first
        assert prompt.render_prompt(context) is prompt.render_prompt(context)
        assert offered.call_count == 1
        # an equal context that is another object renders again, to the same values
        twin = msgspec.structs.replace(context)
        assert twin is not context
        assert prompt.render_tools(twin) == first
        assert prompt.render_prompt(twin) == prompt._render_prompt(context)
        assert offered.call_count == 2


def test_tool_schemas_are_encoded_once_per_tools_tuple() -> None:
    tools = prompt.render_tools(TurnContext(mode="agent"))
    fresh = meter._tools_categories(tools)
    with (
        mock.patch.object(meter, "_tools_chars", ByIdentity(meter._tools_categories)),
        mock.patch.object(compaction, "_tools_chars", ByIdentity(compaction._chars_of_tools)),
        mock.patch.object(msgspec.json, "encode", wraps=msgspec.json.encode) as encode,
    ):
        assert meter._tools_chars(tools) == fresh
        assert compaction.fixed_tokens("sys", tools) == compaction.fixed_tokens("sys", tools)
        calls = encode.call_count
        meter._tools_chars(tools)
        compaction.fixed_tokens("sys", tools)
        assert encode.call_count == calls


def test_the_memo_is_bounded_least_recently_used_first() -> None:
    derived: list[int] = []
    memo: ByIdentity[tuple[int, ...], int] = ByIdentity(
        lambda key: derived.append(key[0]) or key[0], max_entries=2
    )
    a, b, c = (1,) * 3, (2,) * 3, (3,) * 3
    memo(a), memo(b), memo(a), memo(c)  # b is the least recently used: dropped for c
    assert len(memo._entries) == 2
    memo(a), memo(c), memo(b)
    assert derived == [1, 2, 3, 2]
