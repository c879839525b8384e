from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.llm.canonical import encode_message
from cursor_byok.llm.transforms import (
    MISSING_RESULT_TEXT,
    Target,
    sanitize_id,
    strip_surrogates,
    transform_messages,
)
from cursor_byok.llm.types import (
    AssistantMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.llm.strategies import messages

TARGET = Target(api="anthropic", provider="anthropic", model="claude")
norm = lambda i: sanitize_id(i, 64)  # noqa: E731


def assistant(*content: object, **kw: str) -> AssistantMessage:
    fields = {"api": "anthropic", "provider": "anthropic", "model": "claude", **kw}
    return AssistantMessage(content=tuple(content), **fields)  # type: ignore[arg-type]


def test_same_model_keeps_everything_byte_for_byte() -> None:
    m = assistant(
        ThinkingContent(thinking="t", signature="SIG"),
        ThinkingContent(thinking="", signature="DATA", redacted=True),
        TextContent(text="x", signature="ts"),
        ToolCall(id="a|b", name="Read", arguments={"p": 1}, thought_signature="g"),
    )
    out = transform_messages([UserMessage.of_text("q"), m], TARGET, norm)
    assert out[1] is m


def test_foreign_model_drops_signatures_keeps_text_and_rewrites_ids() -> None:
    call_id = "call_abc|fc_+/=xyz"
    m = assistant(
        ThinkingContent(thinking="reasoned", signature="SIG"),
        ThinkingContent(thinking="", signature="DATA", redacted=True),
        ThinkingContent(thinking="  "),
        TextContent(text="answer", signature='{"v":1}'),
        ToolCall(id=call_id, name="Read", arguments={}, thought_signature="g"),
        api="openai-responses",
        provider="openai",
        model="gpt",
    )
    result = ToolResultMessage(tool_call_id=call_id, tool_name="Read", content=())
    out = transform_messages([m, result], TARGET, norm)
    a = out[0]
    assert isinstance(a, AssistantMessage)
    assert a.content[0] == TextContent(text="reasoned")
    assert a.content[1] == TextContent(text="answer")
    call = a.content[2]
    assert isinstance(call, ToolCall) and call.thought_signature is None
    assert call.id == "call_abc_fc____xyz"
    assert isinstance(out[1], ToolResultMessage) and out[1].tool_call_id == call.id


def test_errored_turns_dropped_and_orphan_calls_answered() -> None:
    bad = assistant(TextContent(text="half"), stop_reason="error")  # type: ignore[arg-type]
    orphan = assistant(ToolCall(id="c1", name="Shell"), ToolCall(id="c2", name="Read"))
    answered = ToolResultMessage(tool_call_id="c2", tool_name="Read", content=())
    out = transform_messages(
        [UserMessage.of_text("a"), bad, orphan, answered, UserMessage.of_text("b")], TARGET, norm
    )
    assert len(out) == 5
    synthetic = out[3]
    assert isinstance(synthetic, ToolResultMessage)
    assert synthetic.tool_call_id == "c1" and synthetic.is_error
    assert synthetic.content == (TextContent(text=MISSING_RESULT_TEXT),)


@given(st.lists(messages, max_size=8), st.lists(messages, max_size=4))
def test_output_for_older_messages_never_changes_as_history_grows(a: list, b: list) -> None:  # type: ignore[type-arg]
    """Prefix stability: transforming H then H+X gives the same output for H's part, when H does
    not end with calls still waiting for results (the loop never calls a model then)."""
    last_user = max((i for i, m in enumerate(a) if isinstance(m, UserMessage)), default=-1)
    if any(isinstance(m, AssistantMessage) and m.tool_calls for m in a[last_user + 1 :]):
        a = [*a, UserMessage.of_text("close")]
    first = [encode_message(m) for m in transform_messages(a, TARGET, norm)]
    second = [encode_message(m) for m in transform_messages(a + b, TARGET, norm)]
    assert second[: len(first)] == first


def test_sanitize_id_bounds_and_distinguishes() -> None:
    long1, long2 = "x" * 100 + "1", "x" * 100 + "2"
    assert len(sanitize_id(long1, 40)) == 40
    assert sanitize_id(long1, 40) != sanitize_id(long2, 40)
    assert sanitize_id("", 40) == "call"


def test_strip_surrogates() -> None:
    assert strip_surrogates("a\ud800b") == "ab"
    assert strip_surrogates("ok ✓") == "ok ✓"
