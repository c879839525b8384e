from __future__ import annotations

import msgspec

from cursor_byok.llm.stream import PreparedRequest
from cursor_byok.transport.runtime.stored_request import COMPRESS_FROM, decode_whole, encode_whole


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
    stored = encode_whole(prepared)
    again = decode_whole(stored)
    assert again == prepared and again.body == body
    assert len(stored) * 4 < len(msgspec.json.encode(prepared))


def test_plain_json_rows_still_decode() -> None:
    prepared = PreparedRequest(url="http://x/v1", body=b"{}", model="m")
    assert decode_whole(msgspec.json.encode(prepared)) == prepared


def test_small_requests_are_stored_uncompressed() -> None:
    prepared = PreparedRequest(url="http://x/v1", body=b'{"model":"m","messages":[]}', model="m")
    stored = encode_whole(prepared)
    assert stored == msgspec.msgpack.encode(prepared)  # no zlib below COMPRESS_FROM
    assert decode_whole(stored) == prepared


def test_the_size_threshold_decides_compression() -> None:
    body = b"x" * (COMPRESS_FROM + 10)
    big = PreparedRequest(url="http://x/v1", body=body, model="m")
    small = PreparedRequest(url="http://x/v1", body=body[: COMPRESS_FROM // 2], model="m")
    assert encode_whole(big)[:1] == b"\x78" and len(encode_whole(big)) < len(body) // 10
    assert encode_whole(small)[:1] != b"\x78"
    assert decode_whole(encode_whole(big)) == big
    assert decode_whole(encode_whole(small)) == small
