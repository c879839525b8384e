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


def reference(data: bytes) -> list[SSEEvent]:
    """The event-stream rules applied to a whole stream at once, line by line."""
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[SSEEvent] = []
    values: list[str] = []
    event: str | None = None
    last_id: str | None = None
    for line in [*lines, ""]:  # an event still open at the end is flushed
        if not line:
            if values:
                out.append(SSEEvent("\n".join(values), event or "message", last_id))
            values, event = [], None
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        value = value[1:] if sep and value.startswith(" ") else value
        if name == "data":
            values.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
    return out


_FIELDS = st.sampled_from(
    [b"data: ", b"data:", b"data:  ", b"event: ", b"id: ", b": ", b"retry: ", b"other: "]
)
_VALUES = st.sampled_from([b"", b"{}", b'{"a": 1}', b"x: y", "h\u00e9 \u2603".encode(), b"[DONE]"])
_LINES = st.lists(st.one_of(st.just(b""), st.builds(bytes.__add__, _FIELDS, _VALUES)), max_size=30)


def _chunked(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    p = SSEParser()
    out: list[SSEEvent] = []
    previous = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}):
        out += p.feed(data[previous:cut])
        previous = cut
    out += p.feed(data[previous:])
    return out + p.finish()


@settings(max_examples=300)
@given(_LINES, st.lists(st.integers(0, 10_000), max_size=8))
def test_lf_streams_in_any_chunks_match_the_rules(lines: list[bytes], cuts: list[int]) -> None:
    """LF-only streams take the fast path: multi-line data, comments, names, ids, cut lines."""
    data = b"".join(line + b"\n" for line in lines)
    assert _chunked(data, cuts) == reference(data)


@settings(max_examples=300)
@given(
    _LINES,
    st.lists(st.sampled_from([b"\n", b"\r", b"\r\n"]), min_size=1),
    st.lists(st.integers(0, 10_000), max_size=8),
)
def test_mixed_line_ends_in_any_chunks_match_the_rules(
    lines: list[bytes], ends: list[bytes], cuts: list[int]
) -> None:
    """CR and CRLF (a CRLF cut in two included) next to LF chunks that take the fast path."""
    data = b"".join(line + ends[i % len(ends)] for i, line in enumerate(lines))
    assert _chunked(data, cuts) == reference(data)


def test_lf_fast_path_events() -> None:
    p = SSEParser()
    assert p.feed(b"data: 0\n\n") == [SSEEvent("0")]  # past the BOM check: the fast path
    got = p.feed(b"event: e\nid: 9\ndata: a\ndata:b\n: c\n\ndata: \xc3")
    assert got == [SSEEvent("a\nb", "e", "9")]
    assert p.feed(b"\xa9\n\n") == [SSEEvent("\u00e9", "message", "9")]
