"""Hypothesis strategies for native values."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from cursor_byok.llm.types import (
    AssistantMessage,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

texts = st.text(max_size=40)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-|+/=", min_size=1, max_size=20)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(texts, json_values, max_size=4)
maybe = lambda s: st.none() | s  # noqa: E731

text_blocks = st.builds(TextContent, text=texts, signature=maybe(texts))
images = st.builds(
    ImageContent, data=st.text("abcdef0123=", max_size=12), mime_type=st.just("image/png")
)
thinking = st.builds(
    ThinkingContent, thinking=texts, signature=maybe(texts), redacted=st.booleans()
)
tool_calls = st.builds(
    ToolCall,
    id=ids,
    name=st.sampled_from(["Read", "Shell", "mcp_x"]),
    arguments=arguments,
    thought_signature=maybe(texts),
)
usages = st.builds(
    Usage,
    input=st.integers(0, 10**6),
    output=st.integers(0, 10**6),
    cache_read=st.integers(0, 10**6),
    cache_write=st.integers(0, 10**6),
    reasoning=st.integers(0, 10**6),
)
user_messages = st.builds(
    UserMessage,
    content=st.lists(text_blocks.map(lambda b: TextContent(b.text)) | images, max_size=3).map(
        tuple
    ),
)
assistant_messages = st.builds(
    AssistantMessage,
    content=st.lists(text_blocks | thinking | tool_calls, max_size=4).map(tuple),
    api=st.sampled_from(["openai-chat", "anthropic", "gemini", "openai-responses"]),
    provider=st.sampled_from(["openai", "anthropic", "google", "deepseek"]),
    model=st.sampled_from(["m1", "m2"]),
    usage=usages,
    stop_reason=st.sampled_from(["stop", "length", "toolUse", "error", "aborted"]),
    error_message=maybe(texts),
    response_id=maybe(ids),
)
tool_results = st.builds(
    ToolResultMessage,
    tool_call_id=ids,
    tool_name=texts,
    content=st.lists(text_blocks.map(lambda b: TextContent(b.text)), max_size=2).map(tuple),
    is_error=st.booleans(),
)
messages: st.SearchStrategy[Message] = user_messages | assistant_messages | tool_results
