"""Connect codec: envelopes, incremental reader, end-stream JSON, error mapping, leniency."""

from __future__ import annotations

import base64
import gzip
import itertools
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.transport.connect import envelopes as c
from cursor_byok.transport.cursor.proto import aiserver_pb2


def test_envelope_layout() -> None:
    assert c.encode_envelope(b"abc") == b"\x00\x00\x00\x00\x03abc"
    assert c.encode_envelope(b"", c.FLAG_END_STREAM) == b"\x02\x00\x00\x00\x00"


def test_reader_byte_by_byte() -> None:
    data = c.encode_envelope(b"one") + c.encode_envelope(b"") + c.encode_envelope(b"three" * 100)
    reader = c.EnvelopeReader()
    frames = []
    for i in range(len(data)):
        frames += reader.feed(data[i : i + 1])
        if i < len(data) - 1:
            assert reader.pending or frames
    assert [f.payload for f in frames] == [b"one", b"", b"three" * 100]
    assert reader.pending == 0
    reader.close()


def test_reader_many_frames_in_one_chunk() -> None:
    data = b"".join(c.encode_envelope(bytes([i]) * i) for i in range(50))
    frames = c.EnvelopeReader().feed(data)
    assert [len(f.payload) for f in frames] == list(range(50))


def test_hostile_length_rejected_from_header_alone() -> None:
    reader = c.EnvelopeReader(max_frame=1024)
    with pytest.raises(c.ConnectError) as exc:
        reader.feed(struct.pack(">BI", 0, 0xFFFFFFFF))
    assert exc.value.code == "resource_exhausted"
    assert reader.pending <= 5  # nothing allocated for the payload


def test_frame_exactly_at_limit_is_accepted_and_one_byte_more_is_not() -> None:
    reader = c.EnvelopeReader(max_frame=8)
    assert reader.feed(c.encode_envelope(b"x" * 8))[0].payload == b"x" * 8
    with pytest.raises(c.ConnectError) as exc:
        c.EnvelopeReader(max_frame=8).feed(c.encode_envelope(b"x" * 9))
    assert exc.value.code == "resource_exhausted"
    # The same bound holds for what a compressed frame inflates to.
    gz = c.EnvelopeReader(max_frame=64, encoding="gzip")
    frame = c.encode_envelope(gzip.compress(b"y" * 64), c.FLAG_COMPRESSED)
    assert len(frame) < 64 and gz.feed(frame)[0].payload == b"y" * 64
    with pytest.raises(c.ConnectError) as exc:
        c.EnvelopeReader(max_frame=64, encoding="gzip").feed(
            c.encode_envelope(gzip.compress(b"y" * 65), c.FLAG_COMPRESSED)
        )
    assert exc.value.code == "resource_exhausted"


def test_truncated_input_detected_at_close() -> None:
    reader = c.EnvelopeReader()
    assert reader.feed(c.encode_envelope(b"hello")[:-2]) == []
    with pytest.raises(c.ConnectError) as exc:
        reader.close()
    assert exc.value.code == "invalid_argument"
    header_only = c.EnvelopeReader()
    header_only.feed(b"\x00\x00")
    with pytest.raises(c.ConnectError):
        header_only.close()


def test_gzip_frames() -> None:
    payload = b"compressed payload " * 20
    frame = c.encode_envelope(gzip.compress(payload), c.FLAG_COMPRESSED)
    got = c.EnvelopeReader(encoding="gzip").feed(frame)
    assert got[0].payload == payload
    with pytest.raises(c.ConnectError) as exc:
        c.EnvelopeReader().feed(frame)  # flag set but no connect-content-encoding
    assert exc.value.code == "invalid_argument"


def test_gzip_bomb_limited() -> None:
    bomb = gzip.compress(b"\0" * 100_000)
    frame = c.encode_envelope(bomb, c.FLAG_COMPRESSED)
    with pytest.raises(c.ConnectError) as exc:
        c.EnvelopeReader(max_frame=10_000, encoding="gzip").feed(frame)
    assert exc.value.code == "resource_exhausted"


def test_bad_gzip_and_unknown_encoding() -> None:
    frame = c.encode_envelope(b"not gzip", c.FLAG_COMPRESSED)
    with pytest.raises(c.ConnectError) as exc:
        c.EnvelopeReader(encoding="gzip").feed(frame)
    assert exc.value.code == "invalid_argument"
    with pytest.raises(c.ConnectError) as exc:
        c.decompress(b"x", "br", 100)
    assert exc.value.code == "unimplemented"


def test_end_stream_success_and_error() -> None:
    assert c.end_stream_frame() == b"\x02\x00\x00\x00\x02{}"
    details = aiserver_pb2.ErrorDetails(
        error=aiserver_pb2.ErrorDetails.ERROR_PROVIDER_ERROR
    ).SerializeToString()
    err = c.ConnectError(
        "unavailable", "down", [c.ErrorDetail("aiserver.v1.ErrorDetails", details)]
    )
    frame = c.end_stream_frame(err)
    assert frame[0] == c.FLAG_END_STREAM
    obj = json.loads(frame[5:])
    d = obj["error"]["details"][0]
    assert obj["error"]["code"] == "unavailable" and obj["error"]["message"] == "down"
    assert d["type"] == "aiserver.v1.ErrorDetails"
    assert "=" not in d["value"]
    raw = base64.b64decode(d["value"] + "=" * (-len(d["value"]) % 4))
    assert aiserver_pb2.ErrorDetails.FromString(raw).error == 57
    back = c.parse_end_stream(frame[5:])
    assert back is not None and back.details[0].value == details
    assert c.parse_end_stream(b"{}") is None


def test_error_codes_to_http() -> None:
    # https://connectrpc.com/docs/protocol#error-codes
    expected = {
        "canceled": 499,
        "invalid_argument": 400,
        "unauthenticated": 401,
        "permission_denied": 403,
        "not_found": 404,
        "resource_exhausted": 429,
        "unimplemented": 501,
        "internal": 500,
        "unavailable": 503,
        "deadline_exceeded": 504,
    }
    for code, status in expected.items():
        assert c.http_status_for(code) == status
    assert c.http_status_for("bogus") == 500
    body = json.loads(c.ConnectError("not_found", "x").unary_body())
    assert body == {"code": "not_found", "message": "x"}


def test_lenient_unary_bodies() -> None:
    msg = aiserver_pb2.BidiRequestId(request_id="abc").SerializeToString()
    assert c.decode_unary_body(msg) == msg
    assert c.decode_unary_body(c.encode_envelope(msg)) == msg
    assert c.decode_unary_body(gzip.compress(msg), content_encoding="gzip") == msg
    gz_env = c.encode_envelope(gzip.compress(msg), c.FLAG_COMPRESSED)
    assert c.decode_unary_body(gz_env, envelope_encoding="gzip") == msg
    # gRPC-Web: data frame followed by a trailers frame
    grpc_web = c.encode_envelope(msg) + c.grpc_web_trailers_frame()
    assert c.decode_unary_body(grpc_web, enveloped=True) == msg
    # a raw body whose first bytes happen to look like a header but whose length does not match
    assert not c.looks_enveloped(b"\x00\x00\x00\x00\x09abc")
    assert not c.looks_enveloped(c.end_stream_frame())


def test_grpc_web_trailers() -> None:
    ok = c.grpc_web_trailers_frame()
    assert ok[0] == 0x80 and ok[5:] == b"grpc-status: 0\r\n"
    bad = c.grpc_web_trailers_frame(c.ConnectError("unauthenticated", "no\ntoken"))
    assert b"grpc-status: 16" in bad and b"no%0Atoken" in bad


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_reader_any_chunking_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    data = b"".join(c.encode_envelope(p) for p in payloads)
    points = sorted({min(x, len(data)) for x in cuts} | {0, len(data)})
    reader = c.EnvelopeReader(max_frame=300)
    frames = []
    for a, b in itertools.pairwise(points):
        frames += reader.feed(data[a:b])
    reader.close()
    assert [f.payload for f in frames] == payloads
