"""A run's system prompt and tools are rendered once per context object (loop/memo.py), and
what a hit returns is what rendering gives."""

from __future__ import annotations

from unittest import mock

import msgspec

from cursor_byok.llm.types import ToolDefinition
from cursor_byok.loop import compaction, meter, prompt
from cursor_byok.loop.catalogue import Switches
from cursor_byok.loop.context import TurnContext
from cursor_byok.loop.memo import ByIdentity, ByValue


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


def test_equal_contexts_of_different_runs_share_one_tools_tuple() -> None:
    # Every run decodes its own context: equal mode, switches and subagents give the very
    # same tuple (so the memos keyed on its identity hit), what rendering gives.
    memo = ByValue(prompt._render_tools, prompt._tools_key)
    with mock.patch.object(prompt, "_tools", ByIdentity(memo)):
        first = prompt.render_tools(TurnContext(mode="agent", custom_instructions="a"))
        twin = prompt.render_tools(TurnContext(mode="agent", custom_instructions="b"))
        assert twin is first
        assert first == prompt._render_tools(TurnContext(mode="agent"))
        # another mode or switch is another tuple, rendered for it
        ask = prompt.render_tools(TurnContext(mode="ask"))
        assert ask is not first and ask == prompt._render_tools(TurnContext(mode="ask"))
        off = TurnContext(mode="agent", switches=Switches(disabled_tools=("Shell",)))
        assert prompt.render_tools(off) == prompt._render_tools(off)
        assert prompt.render_tools(off) != first
        # a context with MCP tools (schemas are dicts) is rendered on its own, never shared
        tool = ToolDefinition(name="mcp_x", description="x", parameters={"type": "object"})
        with_mcp = TurnContext(mode="agent", mcp_tools=(tool,))
        again = msgspec.structs.replace(with_mcp)
        assert prompt.render_tools(with_mcp) is not prompt.render_tools(again)
        assert prompt.render_tools(with_mcp)[-1] == tool


def test_by_value_derives_again_for_unhashable_keys_and_stays_bounded() -> None:
    derived: list[object] = []
    memo: ByValue[object, int] = ByValue(
        lambda obj: derived.append(obj) or len(derived), lambda obj: obj, max_entries=2
    )
    assert memo(("a",)) == memo(("a",)) == 1
    unhashable = ([1],)
    assert memo(unhashable) == 2 and memo(unhashable) == 3
    memo(("b",)), memo(("c",))  # ("a",) is the oldest: dropped
    assert len(memo._entries) == 2
    assert memo(("a",)) == 6
