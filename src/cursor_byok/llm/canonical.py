"""Canonical bytes of native messages: exactly one encoding per value.

Struct fields keep their declared order, dict keys are sorted, absent optional fields are left
out and nothing (time, ids) is generated at encode time, so equal messages always give equal
bytes and decoding then re-encoding is byte-identical. History hashes and the prefix-cache
guarantee are defined over these bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from .prefix_memo import PrefixMemo
from .types import Message, RequestMessages

if TYPE_CHECKING:
    from hashlib import _Hash

_encoder = msgspec.json.Encoder(order="deterministic")
_message_decoder = msgspec.json.Decoder(Message)
_request_decoder = msgspec.json.Decoder(RequestMessages)

# JSON text never holds a raw newline (msgspec escapes control characters), so it cleanly
# separates messages in the hashed stream.
_SEPARATOR = b"\n"


def encode_message(message: Message) -> bytes:
    return _encoder.encode(message)


def decode_message(data: bytes) -> Message:
    return _message_decoder.decode(data)


def encode_request(request: RequestMessages) -> bytes:
    return _encoder.encode(request)


def decode_request(data: bytes) -> RequestMessages:
    return _request_decoder.decode(data)


def encode_messages(messages: Iterable[Message]) -> bytes:
    """The ordered history as one byte string: each message's bytes followed by a newline."""
    return b"".join(encode_message(m) + _SEPARATOR for m in messages)


def messages_hash(messages: Iterable[Message]) -> str:
    """SHA-256 (hex) over the ordered canonical encodings.

    A conversation hashes its history before every model call and at the end of every turn,
    and the history only grows: the hash of a longer tuple continues from the kept hash state
    of the longest earlier tuple it starts with (prefix_memo.py), so each call costs what was
    appended, not the whole history.
    """
    seq = messages if isinstance(messages, tuple) else tuple(messages)
    resumed = _prefix_hashes.resume(seq, None)
    h, start = resumed if resumed is not None else (hashlib.sha256(), 0)
    for m in seq[start:]:
        h.update(encode_message(m))
        h.update(_SEPARATOR)
    if start < len(seq):
        _prefix_hashes.keep(seq, None, h.copy(), extended_from=start)
    return h.hexdigest()


PREFIX_HASHES_MAX = 64
_prefix_hashes: PrefixMemo[_Hash] = PrefixMemo(PREFIX_HASHES_MAX)


def last_message_hash(messages: Sequence[Message]) -> str | None:
    if not messages:
        return None
    return hashlib.sha256(encode_message(messages[-1])).hexdigest()


def sorted_value(value: Any) -> Any:
    """The same JSON value with every object's keys in sorted order.

    In-memory dicts keep insertion order while stored ones come back sorted; building every
    dict that enters a native message this way makes both serialize to the same bytes, so a
    conversation reloaded from the store still extends its earlier requests byte-for-byte.
    """
    if isinstance(value, dict):
        return {k: sorted_value(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_value(v) for v in value]
    return value


def to_builtins(value: object) -> object:
    """A JSON-compatible view of a native value (for logs and tests)."""
    return msgspec.to_builtins(value, order="deterministic")
