from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm.sse import SSEError, SSEEvent, SSEParser
from tests.support.upstream import PROVIDER_FIXTURES


def parse(data: bytes, split: int = 0) -> list[SSEEvent]:
    p = SSEParser()
    out: list[SSEEvent] = []
    if split:
        for i in range(0, len(data), split):
            out += p.feed(data[i : i + split])
    else:
        out += p.feed(data)
    return out + p.finish()


def test_basic_fields_and_multiline_data() -> None:
    data = b"event: ping\ndata: {}\n\nid: 7\ndata: a\ndata: b\n\n: comment\n\ndata:x\n\n"
    assert parse(data) == [
        SSEEvent(data="{}", event="ping"),
        SSEEvent(data="a\nb", id="7"),
        SSEEvent(data="x", id="7"),
    ]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_all_line_endings(newline: bytes) -> None:
    data = newline.join([b"event: e", b"data: 1", b"", b"data: 2", b"", b""])
    assert [e.data for e in parse(data)] == ["1", "2"]
    assert [e.data for e in parse(data, split=1)] == ["1", "2"]


def test_bom_and_unterminated_last_event_flushed() -> None:
    assert parse(b"\xef\xbb\xbfdata: a\n\ndata: tail") == [SSEEvent("a"), SSEEvent("tail")]


def test_event_name_resets_between_events() -> None:
    evs = parse(b"event: x\ndata: 1\n\ndata: 2\n\n")
    assert [e.event for e in evs] == ["x", "message"]


def test_empty_data_line_still_dispatches() -> None:
    assert parse(b"data:\n\n") == [SSEEvent("")]


def test_hostile_size_is_refused() -> None:
    p = SSEParser(max_event_bytes=100)
    with pytest.raises(SSEError):
        p.feed(b"data: " + b"x" * 200)
    p2 = SSEParser(max_event_bytes=100)
    with pytest.raises(SSEError):
        for _ in range(30):
            p2.feed(b"data: xxxxxxx\n")


@settings(max_examples=25)
@given(st.integers(1, 64))
def test_chunking_never_changes_the_events(split: int) -> None:
    for path in sorted(PROVIDER_FIXTURES.glob("*/*.sse"))[:20]:
        data = path.read_bytes()
        assert parse(data, split=split) == parse(data), path.name


def test_every_fixture_parses_to_json_data() -> None:
    import json

    count = 0
    for path in sorted(PROVIDER_FIXTURES.glob("*/*.sse")):
        for ev in parse(path.read_bytes()):
            if ev.data.strip() != "[DONE]":
                json.loads(ev.data)
                count += 1
    assert count > 1000
