"""A model call converts only what its conversation appended since the previous call
(llm/prefix_memo.py, `ChatHistory`): the body built from a kept fold is the body built from
nothing, for any sequence of histories (extended, forked, revisited), any target and any
endpoint flavour; and the fold itself is `transform_messages` then `convert_messages`."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.anthropic import request as anthropic
from cursor_byok.llm.gemini import GeminiAdapter
from cursor_byok.llm.gemini import request as gemini
from cursor_byok.llm.openai_chat import (
    ChatCompat,
    ChatHistory,
    OpenAIChatAdapter,
    build_body,
    convert_messages,
    normalize_tool_call_id,
)
from cursor_byok.llm.openai_chat import request as openai_chat
from cursor_byok.llm.openai_responses import OpenAIResponsesAdapter
from cursor_byok.llm.openai_responses import request as responses
from cursor_byok.llm.prefix_memo import PrefixMemo, fold_history
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.transforms import Target, transform_messages
from cursor_byok.llm.types import (
    AssistantMessage,
    ImageContent,
    Message,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.llm.strategies import images, messages, tool_calls

# Tool results that answer calls made earlier more often than random ids would, some with
# images (they are gathered after their run of tool results).
answered = st.builds(
    ToolResultMessage,
    tool_call_id=st.sampled_from(["c1", "c2", "a|b", "weird id!"]),
    tool_name=st.just("Read"),
    content=st.lists(st.builds(TextContent, text=st.text(max_size=8)) | images, max_size=2).map(
        tuple
    ),
    is_error=st.booleans(),
)
calling = st.builds(
    AssistantMessage,
    content=st.lists(
        tool_calls.map(lambda c: msgspec.structs.replace(c, id=c.id if len(c.id) > 3 else "c1")),
        min_size=1,
        max_size=2,
    ).map(tuple),
    api=st.sampled_from(["openai-chat", "anthropic"]),
    provider=st.sampled_from(["p", "other"]),
    model=st.sampled_from(["m", "m2"]),
    stop_reason=st.sampled_from(["toolUse", "toolUse", "error"]),
)
history_messages = messages | answered | calling
compats = st.builds(
    ChatCompat,
    empty_tools_for_tool_history=st.booleans(),
    empty_reasoning_field=st.booleans(),
)
steps = st.lists(
    st.tuples(st.integers(0, 7), st.integers(0, 9), st.lists(history_messages, max_size=4)),
    min_size=1,
    max_size=10,
)


def body(history: tuple[Message, ...], compat: ChatCompat, model: str, memo: Any) -> dict[str, Any]:
    request = RequestMessages(system_prompt="sys", messages=history, tools=())
    return build_body(request, ModelSettings(model=model), "p", compat, memo)


@settings(max_examples=150, deadline=None)
@given(steps, compats, st.sampled_from(["m", "m2"]))
def test_a_kept_fold_builds_the_same_body(plan: list, compat: ChatCompat, model: str) -> None:  # type: ignore[type-arg]
    memo: PrefixMemo[ChatHistory] = PrefixMemo(4)  # small: entries are dropped too
    histories: list[tuple[Message, ...]] = [()]
    for which, keep, more in plan:
        base = histories[which % len(histories)]
        history = base[: min(keep, len(base))] + tuple(more)
        fresh = body(history, compat, model, None)
        assert body(history, compat, model, memo) == fresh
        assert msgspec.json.encode(body(history, compat, model, memo)) == msgspec.json.encode(fresh)
        # the fold is the whole-history functions, one message at a time
        target = Target(api="openai-chat", provider="p", model=model)
        whole = convert_messages(
            transform_messages(history, target, normalize_tool_call_id), compat
        )
        assert fresh["messages"][1:] == whole
        transformed = transform_messages(history, target, normalize_tool_call_id)
        tool_history = any(
            isinstance(m, ToolResultMessage) or (isinstance(m, AssistantMessage) and m.tool_calls)
            for m in transformed
        )
        assert fresh.get("tools") == (
            [] if compat.empty_tools_for_tool_history and tool_history else None
        )
        histories.append(history)
    for history in reversed(histories):
        assert body(history, compat, model, memo) == body(history, compat, model, None)


def test_a_switch_of_model_is_not_served_from_the_other_models_fold() -> None:
    """The fold depends on the target (a foreign model's reasoning is dropped or turned into
    text), so it is kept per target."""
    memo: PrefixMemo[ChatHistory] = PrefixMemo()
    reply = AssistantMessage(
        content=(ThinkingContent(thinking="hmm", signature="reasoning_content"), TextContent("a")),
        api="openai-chat",
        provider="p",
        model="m",
    )
    history = (UserMessage.of_text("q"), reply, UserMessage.of_text("next"))
    same = body(history, ChatCompat(), "m", memo)
    other = body(history, ChatCompat(), "m2", memo)
    assert same["messages"][2].get("reasoning_content") == "hmm"
    assert "reasoning_content" not in other["messages"][2]
    assert other == body(history, ChatCompat(), "m2", None)


def test_the_adapter_converts_only_what_was_appended(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = OpenAIChatAdapter(
        ProviderSettings(name="p", api="openai-chat", base_url="http://127.0.0.1:1/v1")
    )
    settings_ = ModelSettings(model="m")
    history: tuple[Message, ...] = ()
    for i in range(30):
        call = ToolCall(id=f"call_{i}", name="Read", arguments={"path": f"f{i}"})
        history += (
            AssistantMessage(content=(call,), api="openai-chat", provider="p", model="m"),
            ToolResultMessage(
                tool_call_id=call.id, tool_name="Read", content=(TextContent(f"file {i}"),)
            ),
        )
    history = (UserMessage.of_text("start"), *history)
    first = adapter.prepare(RequestMessages("sys", history), settings_)

    converted: list[Message] = []
    real = openai_chat._append_chat

    def counting(message: Message, *args: Any) -> None:
        converted.append(message)
        real(message, *args)

    monkeypatch.setattr(openai_chat, "_append_chat", counting)
    longer = (*history, UserMessage.of_text("one more"))
    second = adapter.prepare(RequestMessages("sys", longer), settings_)
    assert converted == [longer[-1]]
    assert second.body.startswith(first.body[: first.body.index(b'],"stream"')])
    fresh = msgspec.json.encode(
        build_body(RequestMessages("sys", longer), settings_, "p", adapter.compat)
    )
    assert second.body == fresh


def test_unanswered_calls_at_the_end_are_answered_in_the_body_only() -> None:
    """`finish` adds a result for a call without one, but does not change the kept fold: when
    the real result arrives, the body holds it and not the synthetic one."""
    memo: PrefixMemo[ChatHistory] = PrefixMemo()
    call = ToolCall(id="c1", name="Read", arguments={})
    asked = (
        UserMessage.of_text("q"),
        AssistantMessage(content=(call,), api="openai-chat", provider="p", model="m"),
    )
    pending = body(asked, ChatCompat(), "m", memo)
    assert pending["messages"][-1]["role"] == "tool"
    assert pending["messages"][-1]["content"] == "No result provided"
    result = ToolResultMessage(
        tool_call_id="c1",
        tool_name="Read",
        content=(TextContent("real"), ImageContent(data="aa", mime_type="image/png")),
    )
    done = body((*asked, result), ChatCompat(), "m", memo)
    assert [m["role"] for m in done["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert done["messages"][3]["content"] == "real"


def test_folds_resumed_from_one_kept_fold_are_independent() -> None:
    """Two calls may continue the same kept history (a retry, a fork, another thread):
    each gets its own copy, so neither sees what the other fed."""
    memo: PrefixMemo[ChatHistory] = PrefixMemo()
    target = Target(api="openai-chat", provider="p", model="m")
    call = ToolCall(id="c1", name="Read", arguments={})
    image = ImageContent(data="aa", mime_type="image/png")
    base = (
        UserMessage.of_text("q"),
        AssistantMessage(content=(call,), api="openai-chat", provider="x", model="y"),
        ToolResultMessage(tool_call_id="c1", tool_name="Read", content=(image,)),
    )
    fold_history(base, (target, ChatCompat()), lambda: ChatHistory(target, ChatCompat()), memo)
    left = memo.resume((*base, UserMessage.of_text("left")), (target, ChatCompat()))
    right = memo.resume((*base, UserMessage.of_text("right")), (target, ChatCompat()))
    assert left is not None and right is not None and left[1] == right[1] == len(base)
    left[0].feed(UserMessage.of_text("left"))
    left[0].feed(
        AssistantMessage(
            content=(ToolCall(id="weird id!", name="Read", arguments={}),),
            api="openai-chat",
            provider="x",
            model="y",
        )
    )
    right[0].feed(UserMessage.of_text("right"))
    history = (*base, UserMessage.of_text("right"))
    expected = convert_messages(
        transform_messages(history, target, normalize_tool_call_id), ChatCompat()
    )
    assert [*right[0].messages, *right[0].finish()] == expected
    assert [m["role"] for m in right[0].messages] == ["user", "assistant", "tool", "user", "user"]
    assert right[0].finish() == []
    assert right[0].transform.id_map == {} and right[0].transform.pending == []


# -- every adapter: a kept fold builds the same bytes as building from nothing ---------------

ADAPTERS = {
    "openai-chat": lambda: OpenAIChatAdapter(provider("openai-chat")),
    "openai-chat-deepseek": lambda: OpenAIChatAdapter(
        provider("openai-chat"),
        compat=ChatCompat(empty_reasoning_field=True, empty_tools_for_tool_history=True),
    ),
    "openai-responses": lambda: OpenAIResponsesAdapter(provider("openai-responses")),
    "anthropic": lambda: AnthropicAdapter(provider("anthropic")),
    "gemini": lambda: GeminiAdapter(provider("gemini")),
}


def provider(api: str) -> ProviderSettings:
    return ProviderSettings(name="p", api=api, base_url="http://127.0.0.1:1")


def reference_history(api: str, history: tuple[Message, ...], model: str) -> Any:
    """The provider messages as the whole-history functions build them."""
    if api.startswith("openai-chat"):
        return None  # compared above, with each flavour's compat
    if api == "openai-responses":
        target = Target(api=api, provider="p", model=model)
        transformed = transform_messages(history, target, responses.normalize_tool_call_id)
        return [item for m in transformed for item in responses.message_items(m, target)]
    if api == "anthropic":
        target = Target(api=api, provider="p", model=model)
        converted = anthropic.provider_messages(
            transform_messages(history, target, anthropic.normalize_tool_id)
        )
        anthropic.mark_last_block(converted)
        return converted
    target = Target(api=api, provider="p", model=model)
    return gemini.build_contents(
        transform_messages(history, target, gemini.normalize_tool_call_id), target
    )


def sent_history(api: str, body: dict[str, Any]) -> Any:
    if api == "openai-responses":
        return body["input"][1:]  # after the system item
    if api == "anthropic":
        return body["messages"]
    return body["contents"]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
@settings(max_examples=80, deadline=None)
@given(plan=steps, model=st.sampled_from(["m", "m2", "gemini-3-pro"]))
def test_every_adapter_builds_the_same_bytes_from_a_kept_fold(
    name: str,
    plan: list,  # type: ignore[type-arg]
    model: str,
) -> None:
    adapter = ADAPTERS[name]()
    adapter_settings = ModelSettings(model=model, cache_key="k")
    histories: list[tuple[Message, ...]] = [()]
    for which, keep, more in plan:
        base = histories[which % len(histories)]
        history = base[: min(keep, len(base))] + tuple(more)
        request = RequestMessages(system_prompt="sys", messages=history, tools=())
        kept = adapter.prepare(request, adapter_settings)
        fresh = ADAPTERS[name]().prepare(request, adapter_settings)
        assert kept == fresh
        expected = reference_history(adapter.api, history, model)
        if expected is not None:
            expected = msgspec.json.decode(msgspec.json.encode(expected))  # Raw values too
            assert sent_history(adapter.api, msgspec.json.decode(fresh.body)) == expected
        histories.append(history)
    for history in reversed(histories):
        request = RequestMessages(system_prompt="sys", messages=history, tools=())
        assert adapter.prepare(request, adapter_settings) == ADAPTERS[name]().prepare(
            request, adapter_settings
        )


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_a_tool_loop_then_a_new_turn(name: str) -> None:
    """The usual shape, step by step: a call left unanswered at the end of one request, its
    result in the next, then a new user message (Anthropic's cache breakpoint moves on)."""
    adapter = ADAPTERS[name]()
    model_settings = ModelSettings(model="m")
    call = ToolCall(id="call_1", name="Read", arguments={"path": "a"})
    steps_: list[tuple[Message, ...]] = [
        (UserMessage.of_text("read a"),),
        (AssistantMessage(content=(call,), api=adapter.api, provider="p", model="m"),),
        (ToolResultMessage(tool_call_id="call_1", tool_name="Read", content=(TextContent("A"),)),),
        (
            AssistantMessage(
                content=(TextContent("done"),), api=adapter.api, provider="p", model="m"
            ),
            UserMessage.of_text("thanks"),
        ),
    ]
    history: tuple[Message, ...] = ()
    for more in steps_:
        history += more
        request = RequestMessages(system_prompt="sys", messages=history)
        kept = adapter.prepare(request, model_settings)
        assert kept == ADAPTERS[name]().prepare(request, model_settings)
    assert kept.body.count(b"No result provided") == 0
    if name == "anthropic":
        assert kept.body.count(b'"cache_control"') == 2  # the system block and the last message


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_folds_resumed_from_one_kept_fold_are_independent_in_every_adapter(name: str) -> None:
    """One side makes a call of the same model (Gemini then echoes its id on results) and
    leaves it pending; the other side's history must not see any of it."""
    adapter = ADAPTERS[name]()
    model_settings = ModelSettings(model="m")
    image = ImageContent(data="aa", mime_type="image/png")
    base: tuple[Message, ...] = (
        UserMessage.of_text("q"),
        AssistantMessage(
            content=(ToolCall(id="c0", name="Read", arguments={}),),
            api=adapter.api,
            provider="x",
            model="y",
        ),
        ToolResultMessage(tool_call_id="c0", tool_name="Read", content=(image,)),
    )
    adapter.prepare(RequestMessages("sys", base), model_settings)
    own_call = AssistantMessage(
        content=(ToolCall(id="call_own", name="Read", arguments={"p": 1}),),
        api=adapter.api,
        provider="p",
        model="m",
    )
    left_history = (*base, UserMessage.of_text("left"), own_call)
    right_history = (
        *base,
        ToolResultMessage(tool_call_id="call_own", tool_name="Read", content=(TextContent("r"),)),
        UserMessage.of_text("right"),
    )
    entry_key = next(iter(adapter.histories._entries.values())).key  # the key it was kept under
    left = adapter.histories.resume(left_history, entry_key)
    right = adapter.histories.resume(right_history, entry_key)
    assert left is not None and right is not None and left[1] == right[1] == len(base)
    for message in left_history[len(base) :]:
        left[0].feed(message)
    for message in right_history[len(base) :]:
        right[0].feed(message)
    fresh = ADAPTERS[name]()
    fresh.prepare(RequestMessages("sys", right_history), model_settings)
    expected = next(iter(fresh.histories._entries.values())).fold
    assert right[0].converted() == expected.converted()
