"""The context meter (loop/meter.py, loop/apportion.py): categories, scaling, rounding."""

from __future__ import annotations

from fractions import Fraction

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.llm.types import (
    ZERO_USAGE,
    AssistantMessage,
    ImageContent,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from cursor_byok.loop import ConversationState
from cursor_byok.loop.apportion import largest_remainder
from cursor_byok.loop.context import TurnContext
from cursor_byok.loop.meter import (
    CHARS_PER_TOKEN,
    IMAGE_TOKENS,
    LABELS,
    Category,
    PromptChars,
    estimate_tokens,
    last_measured,
    measure,
    meter_of_state,
    next_request_tokens,
    prompt_chars,
    prompt_tokens,
    upcoming_tokens,
)
from cursor_byok.loop.prompt import render_prompt, render_tools, rules_section, skills_section

MCP_TOOL = ToolDefinition(
    name="lookup_ticket",
    description="Find a ticket by id.",
    parameters={"type": "object", "properties": {"id": {"type": "string"}}},
)


def _assistant(*content: object, usage: Usage = ZERO_USAGE) -> AssistantMessage:
    return AssistantMessage(
        content=content,  # type: ignore[arg-type]
        api="openai-completions",
        provider="p",
        model="m",
        usage=usage,
    )


# -- largest remainder ------------------------------------------------------------------------


def test_largest_remainder_gives_leftover_seats_to_the_largest_remainders() -> None:
    # quotas 3.333.., 3.333.., 3.333.. → 3,3,3 and one seat left: the earliest tie wins
    assert largest_remainder([1, 1, 1], 10) == (4, 3, 3)
    # quotas 1.4, 2.8, 5.8 → 1, 2, 5 and two seats: to .8 and .8 (earlier first), not .4
    assert largest_remainder([7, 14, 29], 10) == (1, 3, 6)
    assert largest_remainder([0, 5, 0], 7) == (0, 7, 0)


def test_largest_remainder_edge_cases() -> None:
    assert largest_remainder([0, 0, 0], 9) == (0, 0, 9)  # nothing estimated: the last takes it
    assert largest_remainder([3, 4], 0) == (0, 0)
    assert largest_remainder([], 0) == ()
    with pytest.raises(ValueError):
        largest_remainder([], 1)
    with pytest.raises(ValueError):
        largest_remainder([1, -1], 3)
    with pytest.raises(ValueError):
        largest_remainder([1], -3)


@given(
    st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=2**32),
)
def test_largest_remainder_properties(weights: list[int], total: int) -> None:
    parts = largest_remainder(weights, total)
    assert sum(parts) == total
    assert len(parts) == len(weights)
    whole = sum(weights)
    if whole == 0:
        assert parts[:-1] == (0,) * (len(weights) - 1)
        return
    for w, p in zip(weights, parts, strict=True):
        quota = Fraction(w * total, whole)
        assert quota - 1 < p < quota + 1  # each part is its quota's floor or ceiling
        if w == 0:
            assert p == 0
    assert largest_remainder(weights, total) == parts  # deterministic


# -- categories -------------------------------------------------------------------------------


def test_every_category_is_counted_where_it_sits() -> None:
    context = TurnContext(
        rules=("Use tabs.", "Never push."),
        skills=("Skill (/w/.cursor/skills/i18n/SKILL.md): translations.",),
        mcp_tools=(MCP_TOOL,),
    )
    tools = render_tools(context)
    call = ToolCall(id="c1", name="Read", arguments={"path": "a.py"})
    summary = UserMessage.of_text("Earlier we fixed the parser.")
    messages = (
        summary,
        UserMessage(content=(TextContent(text="look"), ImageContent(data="AAAA", mime_type="x"))),
        _assistant(ThinkingContent(thinking="hmm"), TextContent(text="ok"), call),
        ToolResultMessage(tool_call_id="c1", tool_name="Read", content=(TextContent(text="x=1"),)),
    )
    request = RequestMessages(render_prompt(context), messages, tools)
    chars = prompt_chars(request, context, summary_messages=1)
    rules = rules_section(context)
    assert rules and chars.rules == len(rules)
    skills = skills_section(context)
    assert skills and skills in request.system_prompt and chars.skills == len(skills)
    assert "i18n/SKILL.md" not in rules  # the skills are not rules
    assert chars.system_prompt == len(request.system_prompt) - len(rules) - len(skills)
    mcp = len("lookup_ticket") + len("Find a ticket by id.")
    mcp += len(msgspec.json.encode(MCP_TOOL.parameters, order="deterministic"))
    assert chars.mcp == mcp

    def size(t: ToolDefinition) -> int:
        return (
            len(t.name)
            + len(t.description)
            + len(msgspec.json.encode(t.parameters, order="deterministic"))
        )

    native = [t for t in tools if t.name not in ("lookup_ticket", "Task")]
    assert chars.tools == sum(size(t) for t in native)
    # Task's definition describes the subagent types: the subagent definitions' category.
    (task,) = [t for t in tools if t.name == "Task"]
    assert chars.subagents == size(task) > 0
    assert chars.summarized_conversation == len("Earlier we fixed the parser.")
    args = len(msgspec.json.encode({"path": "a.py"}))
    assert chars.conversation == len("look") + len("hmm") + len("ok") + len("Read") + args + 3
    assert chars.images == 1
    assert estimate_tokens(chars, Category.CONVERSATION) == (
        -(-chars.conversation // CHARS_PER_TOKEN) + IMAGE_TOKENS
    )


def test_a_native_tool_is_never_counted_as_mcp() -> None:
    context = TurnContext()
    request = RequestMessages(render_prompt(context), (), render_tools(context))
    chars = prompt_chars(request, context)
    assert chars.mcp == 0 and chars.rules == 0 and chars.tools > 0


def test_rules_not_in_the_system_prompt_count_as_system_prompt() -> None:
    # A request whose system prompt was built otherwise (say, by a compaction) keeps all of it
    context = TurnContext(rules=("Use tabs.",))
    request = RequestMessages("Just this.", ())
    chars = prompt_chars(request, context)
    assert (chars.system_prompt, chars.rules) == (len("Just this."), 0)


# -- the meter --------------------------------------------------------------------------------


def test_measure_scales_the_estimate_to_the_providers_total() -> None:
    chars = PromptChars(system_prompt=400, tools=1200, rules=40, mcp=0, conversation=2360)
    meter = measure(chars, used=5003, window=200_000)
    assert meter.measured and meter.used_tokens == 5003 and meter.max_tokens == 200_000
    assert [c.category for c in meter.categories] == list(Category)
    assert [c.label for c in meter.categories] == [LABELS[c] for c in Category]
    tokens = {c.category: c.tokens for c in meter.categories}
    assert sum(tokens.values()) == 5003
    # estimates 100, 300, 10, 590 of 1000 → exact quotas 500.3, 1500.9, 50.03, 2951.77
    assert tokens[Category.SYSTEM_PROMPT] == 500
    assert tokens[Category.TOOLS] == 1501
    assert tokens[Category.RULES] == 50
    assert tokens[Category.CONVERSATION] == 2952
    assert tokens[Category.MCP] == tokens[Category.SKILLS] == 0
    assert {c.category: c.chars for c in meter.categories}[Category.TOOLS] == 1200


def test_measure_without_usage_is_the_estimate() -> None:
    chars = PromptChars(system_prompt=401, conversation=8)
    meter = measure(chars, used=0, window=1000)
    assert not meter.measured
    assert meter.used_tokens == 101 + 2
    assert sum(c.tokens for c in meter.categories) == meter.used_tokens


@given(
    st.builds(
        PromptChars,
        system_prompt=st.integers(0, 10**6),
        tools=st.integers(0, 10**6),
        rules=st.integers(0, 10**5),
        mcp=st.integers(0, 10**5),
        summarized_conversation=st.integers(0, 10**5),
        conversation=st.integers(0, 10**7),
        images=st.integers(0, 20),
    ),
    st.integers(0, 10**7),
)
def test_the_categories_always_sum_to_used(chars: PromptChars, used: int) -> None:
    meter = measure(chars, used=used, window=128_000)
    assert sum(c.tokens for c in meter.categories) == meter.used_tokens
    if used:
        assert meter.used_tokens == used
    for c in meter.categories:
        if estimate_tokens(chars, c.category) == 0 and chars.total + chars.images:
            assert c.tokens == 0
    # unmeasured, each category is its own estimate, and the whole is their sum
    estimated = measure(chars, used=0, window=128_000)
    assert [c.tokens for c in estimated.categories] == [
        estimate_tokens(chars, c.category) for c in estimated.categories
    ]
    assert [c.chars for c in estimated.categories] == [
        chars.of(c.category) for c in estimated.categories
    ]
    assert estimated.used_tokens == estimate_tokens(chars)


def test_prompt_tokens_is_input_plus_cache() -> None:
    assert prompt_tokens(Usage(input=10, output=99, cache_read=20, cache_write=3)) == 33


def test_next_request_tokens_calibrates_on_the_last_call() -> None:
    last = PromptChars(system_prompt=4000)  # estimated 1000, measured 1300
    grown = PromptChars(system_prompt=4000, conversation=800)  # +200 estimated
    assert next_request_tokens(grown, last, 1300) == 1500
    shrunk = PromptChars(system_prompt=2000)  # half the estimate → half the measured
    assert next_request_tokens(shrunk, last, 1300) == 650
    assert next_request_tokens(grown, None, 0) == 1200


def test_meter_of_state_takes_the_last_measured_call() -> None:
    context = TurnContext(rules=("Be brief.",))
    first = UserMessage.of_text("hello")
    answer = _assistant(TextContent(text="hi"), usage=Usage(input=700, cache_read=300, output=5))
    second = UserMessage.of_text("again")
    unmeasured = _assistant(TextContent(text="yes"))  # a provider that reported no usage
    state = msgspec.structs.replace(
        ConversationState.new("c"),
        context=context,
        messages=(first, answer, second, unmeasured),
    )
    meter = meter_of_state(state, 32_768)
    assert meter.measured and meter.used_tokens == 1000 and meter.max_tokens == 32_768
    chars = {c.category: c.chars for c in meter.categories}
    assert chars[Category.CONVERSATION] == len("hello")  # the request that measured 1000
    assert chars[Category.RULES] == len(rules_section(context))
    fresh = msgspec.structs.replace(ConversationState.new("c"), context=context, messages=(first,))
    estimated = meter_of_state(fresh, 32_768)
    assert not estimated.measured
    assert estimated.used_tokens == sum(c.tokens for c in estimated.categories) > 0


def test_upcoming_tokens_is_calibrated_on_the_last_measured_call() -> None:
    context = TurnContext()
    first = UserMessage.of_text("hello")
    answer = _assistant(TextContent(text="hi"), usage=Usage(input=5_000, cache_read=1_000))
    state = msgspec.structs.replace(
        ConversationState.new("c"), context=context, messages=(first, answer)
    )
    last = last_measured(state)
    assert last is not None and last[1] == 6_000
    request = RequestMessages(
        render_prompt(context),
        (first, answer, UserMessage.of_text("x" * 400)),
        render_tools(context),
    )
    chars = prompt_chars(request, context)
    assert upcoming_tokens(state, chars) == 6_000 + estimate_tokens(chars) - estimate_tokens(
        last[0]
    )
    assert upcoming_tokens(state, chars) == next_request_tokens(chars, last[0], 6_000)
    fresh = msgspec.structs.replace(state, messages=(first,))
    assert last_measured(fresh) is None
    assert upcoming_tokens(fresh, chars) == estimate_tokens(chars)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(alphabet="abc xyz_"),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(alphabet="kq", max_size=3), inner, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_tool_arguments_count_as_their_compact_json(value: object) -> None:
    call = ToolCall(id="c", name="T", arguments={"v": value})
    chars = prompt_chars(RequestMessages("", (_assistant(call),)), TurnContext())
    assert chars.conversation == len("T") + len(msgspec.json.encode({"v": value}))
