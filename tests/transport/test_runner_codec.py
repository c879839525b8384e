from __future__ import annotations

import msgspec

from cursor_byok.llm.stream import PreparedRequest
from cursor_byok.transport.runner import decode_prepared, encode_prepared


def test_stored_request_round_trips_byte_for_byte_and_is_compressed() -> None:
    history = [
        {"role": "user", "content": f"message {i} " + "lorem ipsum " * 40} for i in range(50)
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
