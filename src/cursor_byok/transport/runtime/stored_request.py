"""The stored form of a model call's exact request, and how to get the bytes back.

Why deltas: every call of a conversation sends the whole prompt, and consecutive prompts extend
each other byte for byte. Stored whole, a conversation costs O(calls x prompt) bytes, and a
100 KB prompt cost ~2 ms of zlib on the event loop before every call. Stored as what changed
against the previous call's body (the bytes kept at the head and at the tail, and the new
middle), a call costs about what it adds, and finding the change is two binary searches of
in-place comparisons (tens of µs for 400 KB).

Forms (told apart by the first byte):
- whole: msgpack of `PreparedRequest` (a map, 0x80-0x8f / 0xde), zlib of it (0x78) from
  COMPRESS_FROM bytes on, or JSON (`{`) in rows written by early versions;
- delta: DELTA_TAG + msgpack of `_Delta`. Its base is another call of the same conversation,
  stored earlier in the same commit order (a base is never deleted), and a chain is at most
  MAX_CHAIN deltas long, so a resume reads a bounded number of rows.

The rebuilt body is checked against the call's `request_hash` (sha256 of the body sent).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Awaitable, Callable

import msgspec

from ...llm.stream import PreparedRequest

# Whole requests (and a delta's middle) from this size on are compressed. Below it the few
# kilobytes saved are not worth the time: zlib at level 1 took 70-90 µs for a 6 KB request on
# the benchmark machine, on the event loop before the call.
COMPRESS_FROM = 32 * 1024
# A delta's base may itself be a delta this many times over; then a whole request is stored.
MAX_CHAIN = 64
DELTA_TAG = b"\x00"  # never the first byte of msgpack map, zlib stream or JSON object
_ZLIB = b"\x78"


class StoredRequestError(Exception):
    """A stored request that cannot be rebuilt (a missing base, a broken chain, bad bytes)."""


class RequestBase(msgspec.Struct, frozen=True):
    """The previous call of a conversation, as a base for the next one's delta."""

    call_id: str
    body: bytes
    depth: int  # 0: stored whole; n: a delta on a base of depth n - 1


class _Delta(msgspec.Struct, frozen=True, array_like=True):
    base: str  # call id of the base request
    depth: int
    head: int  # bytes kept from the start of the base body
    tail: int  # bytes kept from the end of the base body
    middle: bytes  # what comes between them (zlib from COMPRESS_FROM bytes on)
    compressed: bool
    request: PreparedRequest  # everything but the body


_json_decoder = msgspec.json.Decoder(PreparedRequest)
_msgpack_decoder = msgspec.msgpack.Decoder(PreparedRequest)
_delta_decoder = msgspec.msgpack.Decoder(_Delta)


def encode_whole(prepared: PreparedRequest) -> bytes:
    """msgpack (the body stays raw bytes, not base64), zlib level 1 from COMPRESS_FROM on."""
    packed = msgspec.msgpack.encode(prepared)
    return packed if len(packed) < COMPRESS_FROM else zlib.compress(packed, 1)


def decode_whole(data: bytes) -> PreparedRequest:
    if data[:1] == b"{":  # plain JSON rows
        return _json_decoder.decode(data)
    if data[:1] == _ZLIB:  # a msgpack map never starts with this byte
        data = zlib.decompress(data)
    return _msgpack_decoder.decode(data)


def encode_request(
    prepared: PreparedRequest, base: RequestBase | None, call_id: str
) -> tuple[bytes, RequestBase]:
    """The stored form of `prepared` (a delta on `base` when that pays), and the base the
    conversation's next call can use once this one is committed."""
    body = prepared.body
    if base is not None and base.depth < MAX_CHAIN and base.call_id != call_id:
        head = common_prefix(base.body, body)
        tail = common_suffix(base.body, body, min(len(base.body), len(body)) - head)
        middle = body[head : len(body) - tail]
        if len(middle) <= len(body) // 2:
            compressed = len(middle) >= COMPRESS_FROM
            delta = _Delta(
                base=base.call_id,
                depth=base.depth + 1,
                head=head,
                tail=tail,
                middle=zlib.compress(middle, 1) if compressed else middle,
                compressed=compressed,
                request=msgspec.structs.replace(prepared, body=b""),
            )
            stored = DELTA_TAG + msgspec.msgpack.encode(delta)
            return stored, RequestBase(call_id, body, delta.depth)
    return encode_whole(prepared), RequestBase(call_id, body, 0)


def is_delta(data: bytes) -> bool:
    return data[:1] == DELTA_TAG


async def load_request(
    data: bytes, request_hash: str, fetch: Callable[[str], Awaitable[bytes | None]]
) -> PreparedRequest:
    """Rebuild the exact request from its stored form; `fetch(call_id)` returns another call's
    stored form. Raises StoredRequestError when that is impossible or the bytes differ from
    what was sent."""
    chain: list[_Delta] = []
    while is_delta(data):
        try:
            delta = _delta_decoder.decode(data[1:])
        except msgspec.DecodeError as exc:
            raise StoredRequestError(f"a stored request delta is unreadable: {exc}") from None
        chain.append(delta)
        if len(chain) > MAX_CHAIN:
            raise StoredRequestError("a stored request's chain of deltas is too long")
        base = await fetch(delta.base)
        if base is None:
            raise StoredRequestError(f"the base request of call {delta.base!r} is missing")
        data = base
    try:
        whole = decode_whole(data)
    except (msgspec.DecodeError, zlib.error) as exc:
        raise StoredRequestError(f"a stored request is unreadable: {exc}") from None
    body = whole.body
    for delta in reversed(chain):
        if delta.head + delta.tail > len(body):
            raise StoredRequestError(f"the delta on call {delta.base!r} does not fit its base")
        middle = zlib.decompress(delta.middle) if delta.compressed else delta.middle
        body = body[: delta.head] + middle + body[len(body) - delta.tail :]
    request = msgspec.structs.replace(chain[0].request, body=body) if chain else whole
    if hashlib.sha256(body).hexdigest() != request_hash:
        raise StoredRequestError("a rebuilt request differs from the bytes that were sent")
    return request


# `bytes.startswith`/`endswith` take a memoryview and compare in place (memcmp, no copy): 15 µs
# for 400 KB, where comparing two bytes slices cost up to 0.6 ms (two large copies) and `==` on
# memoryviews goes element by element. Below this span the search finishes byte by byte.
_SCAN = 64


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of `a` and `b`."""
    n = min(len(a), len(b))
    view = memoryview(a)
    if b.startswith(view[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > _SCAN:
        mid = (lo + hi) // 2
        if b.startswith(view[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    while a[lo] == b[lo]:
        lo += 1
    return lo


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the longest common suffix of `a` and `b`, at most `limit`."""
    la, lb = len(a), len(b)
    n = max(0, min(la, lb, limit))
    view = memoryview(a)
    if b.endswith(view[la - n :]):
        return n
    lo, hi = 0, n  # the last lo bytes agree; the last hi do not
    while hi - lo > _SCAN:
        mid = (lo + hi) // 2
        if b.endswith(view[la - mid : la - lo], 0, lb - lo):
            lo = mid
        else:
            hi = mid
    while a[la - lo - 1] == b[lb - lo - 1]:
        lo += 1
    return lo
