from __future__ import annotations

import pytest

from cursor_byok.llm.assembler import AssemblerError, MessageAssembler, parse_arguments
from cursor_byok.llm.events import DoneEvent, ErrorEvent, TextDelta, ToolCallEnd
from cursor_byok.llm.types import TextContent, ThinkingContent, ToolCall, Usage


def asm() -> MessageAssembler:
    a = MessageAssembler(api="x", provider="p", model="m")
    a.start()
    return a


def test_indices_partial_and_done() -> None:
    a = asm()
    ti, _ = a.open_thinking()
    a.thinking_delta(ti, "hm")
    a.append_signature(ti, "sig")
    a.append_signature(ti, "nature")
    xi, _ = a.open_text()
    ev = a.text_delta(xi, "Hel")
    assert isinstance(ev, TextDelta) and ev.content_index == 1
    a.text_delta(xi, "lo")
    assert ev.partial is not None and ev.partial.snapshot().text == "Hello"
    ci, _ = a.open_tool_call("c1", "Read")
    a.tool_call_delta(ci, '{"path":')
    a.tool_call_delta(ci, '"x"}')
    ends = a.close_all()
    assert [e.content_index for e in ends] == [0, 1, 2]
    a.set_usage(Usage(input=5, output=7))
    done = a.done("toolUse")
    assert isinstance(done, DoneEvent)
    assert done.message.content == (
        ThinkingContent(thinking="hm", signature="signature"),
        TextContent(text="Hello"),
        ToolCall(id="c1", name="Read", arguments={"path": "x"}),
    )
    assert done.message.usage.output == 7 and done.message.stop_reason == "toolUse"


def test_invalid_arguments_are_reported_with_raw_text() -> None:
    a = asm()
    i, _ = a.open_tool_call("c", "Shell")
    a.tool_call_delta(i, '{"command": "ls"')
    end = a.close_tool_call(i)
    assert isinstance(end, ToolCallEnd)
    assert end.tool_call.arguments == {}
    assert end.tool_call.raw_arguments == '{"command": "ls"'
    assert end.tool_call.arguments_error and "not valid JSON" in end.tool_call.arguments_error


@pytest.mark.parametrize(
    ("raw", "args", "ok"),
    [
        ("", {}, True),
        ("  ", {}, True),
        ('{"a":1}', {"a": 1}, True),
        ("[1]", {}, False),
        ("null", {}, False),
        ("{", {}, False),
    ],
)
def test_parse_arguments(raw: str, args: dict, ok: bool) -> None:  # type: ignore[type-arg]
    got, err = parse_arguments(raw)
    assert got == args and (err is None) == ok


def test_protocol_misuse_raises() -> None:
    a = MessageAssembler(api="x", provider="p", model="m")
    with pytest.raises(AssemblerError):
        a.open_text()
    a.start()
    i, _ = a.open_text()
    with pytest.raises(AssemblerError):
        a.done("stop")  # open block
    a.close_text(i)
    with pytest.raises(AssemblerError):
        a.text_delta(i, "late")
    a.done("stop")
    with pytest.raises(AssemblerError):
        a.fail("again")


def test_fail_keeps_what_was_seen_and_flags() -> None:
    a = asm()
    i, _ = a.open_text()
    a.text_delta(i, "half")
    err = a.fail("boom", reason="aborted", http_status=None)
    assert isinstance(err, ErrorEvent)
    assert err.message.stop_reason == "aborted" and err.message.text == "half"
    assert err.error_message == "boom"


def test_delta_cost_does_not_grow_with_length() -> None:
    """Each delta appends a fragment; the text is joined only on snapshot."""
    a = asm()
    i, _ = a.open_text()
    for _ in range(20_000):
        a.text_delta(i, "x")
    assert a.snapshot().text == "x" * 20_000
    assert len(a.snapshot().text) == 20_000


def test_every_delta_counts_in_progress_and_shows_in_the_partial_message() -> None:
    a = asm()
    ti, _ = a.open_thinking()
    xi, _ = a.open_text()
    ci, _ = a.open_tool_call("c1", "Read")
    seen = []
    for add, index, piece in (
        (a.thinking_delta, ti, "hm"),
        (a.text_delta, xi, "H\u00e9"),
        (a.tool_call_delta, ci, '{"p":1}'),
        (a.text_delta, xi, "!"),
    ):
        add(index, piece)
        progress = a.progress()
        seen.append((progress.chars, progress.deltas, a.snapshot().text))
    assert seen == [(2, 1, ""), (4, 2, "H\u00e9"), (11, 3, "H\u00e9"), (12, 4, "H\u00e9!")]
