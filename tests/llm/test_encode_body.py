"""Every adapter's body, spliced from the JSON its history fold encoded once per item
(llm/encoded_items.py, issue 28), is byte for byte the JSON of the whole body built from
nothing: for any sequence of histories (extended, forked, revisited), any options, an
`extra_body` that replaces the history's own key included; and a call encodes only the items
appended since the previous one."""

from __future__ import annotations

from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm import encoded_items
from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.anthropic import request as anthropic
from cursor_byok.llm.encoded_items import EncodedItems, splice
from cursor_byok.llm.gemini import GeminiAdapter
from cursor_byok.llm.gemini import request as gemini
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.openai_chat import request as chat
from cursor_byok.llm.openai_responses import OpenAIResponsesAdapter
from cursor_byok.llm.openai_responses import request as responses
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.transforms import Target, transform_messages
from cursor_byok.llm.types import (
    Message,
    RequestMessages,
    TextContent,
    ToolDefinition,
    UserMessage,
)
from tests.llm.test_history_memo import steps

TOOL = ToolDefinition(name="Read", description='read "a" file', parameters={"type": "object"})


def provider(api: str) -> ProviderSettings:
    return ProviderSettings(name="p", api=api, base_url="http://127.0.0.1:1")


def whole(api: str, request: RequestMessages, options: ModelSettings) -> bytes:
    """The body built whole from nothing, encoded whole: what every call sent before."""
    if api == "openai-responses":
        return msgspec.json.encode(responses.build_body(request, options, "p"))
    if api == "gemini":
        return msgspec.json.encode(gemini.build_body(request, options, "p"))
    if api == "anthropic":
        target = Target(api=api, provider="p", model=options.model)
        messages = transform_messages(request.messages, target, anthropic.normalize_tool_id)
        return msgspec.json.encode(anthropic.build_body(request, options, messages))
    return msgspec.json.encode(chat.build_body(request, options, "p", chat.ChatCompat()))


ADAPTERS = {
    "openai-chat": lambda: OpenAIChatAdapter(provider("openai-chat")),
    "openai-responses": lambda: OpenAIResponsesAdapter(provider("openai-responses")),
    "anthropic": lambda: AnthropicAdapter(provider("anthropic")),
    "gemini": lambda: GeminiAdapter(provider("gemini")),
}
# the key of each body that holds the history (an extra_body of that name replaces it)
HISTORY_KEY = {
    "openai-chat": "messages",
    "openai-responses": "input",
    "anthropic": "messages",
    "gemini": "contents",
}

option_sets = st.builds(
    ModelSettings,
    model=st.sampled_from(["m", "gemini-3-pro"]),
    max_output_tokens=st.none() | st.integers(1, 99999),
    temperature=st.none() | st.floats(0, 2, allow_nan=False),
    reasoning=st.booleans(),
    reasoning_effort=st.none() | st.sampled_from(["low", "high"]),
    extra_body=st.dictionaries(
        st.sampled_from(["z", "seed", "model", "HISTORY"]),
        st.integers(0, 5) | st.just([]),
        max_size=2,
    ),
    cache_key=st.none() | st.just("k"),
)


@pytest.mark.parametrize("name", sorted(ADAPTERS))
@settings(max_examples=120, deadline=None)
@given(
    plan=steps,
    options=option_sets,
    system=st.sampled_from(["", 'sys ✓ "quoted"']),
    tools=st.booleans(),
)
def test_the_spliced_body_is_the_json_of_the_whole_body(
    name: str,
    plan: list,  # type: ignore[type-arg]
    options: ModelSettings,
    system: str,
    tools: bool,
) -> None:
    extra = {HISTORY_KEY[name] if k == "HISTORY" else k: v for k, v in options.extra_body.items()}
    options = msgspec.structs.replace(options, extra_body=extra)
    adapter = ADAPTERS[name]()
    histories: list[tuple[Message, ...]] = [()]
    for which, keep, more in plan:
        base = histories[which % len(histories)]
        history = base[: min(keep, len(base))] + tuple(more)
        request = RequestMessages(system, history, (TOOL,) if tools else ())
        expected = whole(adapter.api, request, options)
        assert adapter.prepare(request, options).body == expected
        assert ADAPTERS[name]().prepare(request, options).body == expected
        histories.append(history)
    for history in reversed(histories):  # every fold kept, then revisited
        request = RequestMessages(system, history, (TOOL,) if tools else ())
        assert adapter.prepare(request, options).body == whole(adapter.api, request, options)


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_each_call_encodes_only_what_was_appended(name: str) -> None:
    adapter = ADAPTERS[name]()
    options = ModelSettings(model="m")
    history: tuple[Message, ...] = ()
    with mock.patch.object(encoded_items, "_encode", wraps=encoded_items._encode) as encoded:
        for turn in range(30):
            history = (*history, UserMessage(content=(TextContent(text=f"turn {turn}" * 50),)))
            before = encoded.call_count
            adapter.prepare(RequestMessages("sys", history), options)
            # the new message (chat encodes with its own function, counted in its own test)
            assert encoded.call_count - before == (0 if name == "openai-chat" else 1), turn


def test_the_join_extends_the_previous_one() -> None:
    items = EncodedItems()
    things: list[Any] = []
    for k in range(6):
        things.append({"k": k})
        items.sync(things)
        assert items.joined() == b",".join(msgspec.json.encode(t) for t in things)
        assert items.joined(k) == b",".join(msgspec.json.encode(t) for t in things[:k])
    copy = items.copy()
    things.append("more")
    copy.sync(things)
    assert len(items) == 6 and len(copy) == 7  # a copy extends on its own


def test_a_body_without_its_placeholder_is_not_spliced() -> None:
    encoder = msgspec.json.Encoder()
    body: dict[str, Any] = {"a": 1, "h": encoded_items.PLACEHOLDER, "b": "x"}
    assert splice(encoder, body, "h", [b"1,2", b"", b"3"]) == b'{"a":1,"h":[1,2,3],"b":"x"}'
    assert splice(encoder, {"a": 1, "h": []}, "h", [b"1"]) is None  # replaced by extra_body
    twice = {"h": encoded_items.PLACEHOLDER, "x": encoded_items.PLACEHOLDER}
    assert splice(encoder, twice, "h", [b"1"]) is None


def test_runs_join_to_the_history_and_reuse_the_kept_join() -> None:
    """`runs` is `joined` split at the kept join: the body's own join copies the history, and
    the kept join is made again only once `REJOIN_AFTER` items lie past it."""
    items = EncodedItems()
    things: list[Any] = []
    kept: list[bytes] = []  # every first run, alive, so no two share an id
    for k in range(3 * encoded_items.REJOIN_AFTER):
        things.append({"k": k, "text": "x" * k})
        items.sync(things)
        runs = items.runs()
        assert b",".join(runs) == b",".join(msgspec.json.encode(t) for t in things)
        assert b",".join(items.runs(k)) == b",".join(msgspec.json.encode(t) for t in things[:k])
        assert all(runs) and len(runs) <= encoded_items.REJOIN_AFTER
        kept.append(runs[0])
    assert len({id(r) for r in kept}) <= 8  # not a new join per call
