from __future__ import annotations

import msgspec

from cursor_byok.llm.stream import PreparedRequest
from cursor_byok.transport.runner import COMPRESS_FROM, decode_prepared, encode_prepared


def test_stored_request_round_trips_byte_for_byte_and_is_compressed() -> None:
    history = [
        {"role": "user", "content": f"message {i} " + "lorem ipsum " * 40} for i in range(120)
    ]
    body = msgspec.json.encode({"model": "m", "messages": history, "stream": True})
    prepared = PreparedRequest(
        url="https://example.invalid/v1/chat/completions",
        body=body,
        model="m",
        headers=(("content-type", "application/json"),),
    )
    stored = encode_prepared(prepared)
    again = decode_prepared(stored)
    assert again == prepared and again.body == body
    assert len(stored) * 4 < len(msgspec.json.encode(prepared))


def test_plain_json_rows_still_decode() -> None:
    prepared = PreparedRequest(url="http://x/v1", body=b"{}", model="m")
    assert decode_prepared(msgspec.json.encode(prepared)) == prepared


def test_small_requests_are_stored_uncompressed() -> None:
    prepared = PreparedRequest(url="http://x/v1", body=b'{"model":"m","messages":[]}', model="m")
    stored = encode_prepared(prepared)
    assert stored == msgspec.msgpack.encode(prepared)  # no zlib below COMPRESS_FROM
    assert decode_prepared(stored) == prepared


def test_the_size_threshold_decides_compression() -> None:
    body = b"x" * (COMPRESS_FROM + 10)
    big = PreparedRequest(url="http://x/v1", body=body, model="m")
    small = PreparedRequest(url="http://x/v1", body=body[: COMPRESS_FROM // 2], model="m")
    assert encode_prepared(big)[:1] == b"\x78" and len(encode_prepared(big)) < len(body) // 10
    assert encode_prepared(small)[:1] != b"\x78"
    assert decode_prepared(encode_prepared(big)) == big
    assert decode_prepared(encode_prepared(small)) == small
