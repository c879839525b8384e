"""A history fold's provider items as JSON, each encoded once, and the body spliced from them.

Every model call of a conversation sends the whole history, and encoding the whole body each
time made a call's CPU grow with the conversation (issue 28). A history fold (prefix_memo.py)
builds each provider item once and shares it with later calls; `EncodedItems` keeps each
item's JSON beside it, encoded when the fold built it, and the comma-joined run of them as of
the previous call, so the next call copies that run once (a contiguous copy) and appends what
is new, instead of encoding or walking every item again.

`splice` writes the body: the request's own dict encoded with a one-byte placeholder where
the history's array goes, then the pieces put in its place. msgspec writes an array as
`[` + the elements' JSON joined by `,` + `]` with no whitespace, and an item's JSON is the
same alone or inside the body, so the result is byte for byte the JSON of the whole body
(tests/llm/test_encode_body.py checks every adapter against its `build_body`). The
placeholder is a NUL byte, which msgspec never writes (it escapes control characters in
strings); a body that somehow holds one anyway is encoded whole instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .append_only import Shared

_encode = msgspec.json.encode
_MARK = b"\x00"
PLACEHOLDER = msgspec.Raw(_MARK)


class EncodedItems:
    """The JSON of a fold's items, in order, and their join up to some count, kept for the
    next call. Copied with its fold (the pieces shared, not copied: append_only.py); the join
    is a pure function of the items, so computing it on a kept fold only caches what any copy
    would compute."""

    __slots__ = ("_count", "_joined", "parts")

    def __init__(self) -> None:
        self.parts: Shared[bytes] = Shared()  # shared with copies (append_only.py)
        self._joined = b""  # b",".join(parts[:_count])
        self._count = 0

    def copy(self) -> EncodedItems:
        other = EncodedItems.__new__(EncodedItems)
        other.parts = self.parts.copy()
        other._joined = self._joined
        other._count = self._count
        return other

    def __len__(self) -> int:
        return len(self.parts)

    def sync(
        self, items: Sequence[Any] | Shared[Any], encode: Callable[[Any], bytes] | None = None
    ) -> None:
        """Encode the items appended since the last sync (`items` only grows)."""
        parts = self.parts
        parts.extend(map(encode or _encode, items[len(parts) :]))

    def joined(self, count: int | None = None) -> bytes:
        """The JSON of the first `count` items (all by default), comma-joined: the previous
        join extended when it covers fewer, else joined again from the pieces."""
        n = len(self.parts) if count is None else count
        if n == self._count:
            return self._joined
        if 0 < self._count < n:
            joined = b",".join([self._joined, *self.parts[self._count : n]])
        else:
            joined = b",".join(self.parts[:n])
        self._joined, self._count = joined, n
        return joined


def splice(
    encoder: msgspec.json.Encoder, body: dict[str, Any], key: str, pieces: list[bytes]
) -> bytes | None:
    """The JSON of `body` with `body[key]` (set to PLACEHOLDER by the caller) the array whose
    elements are the comma-joined runs `pieces` (empty runs skipped); None when the
    placeholder cannot be found exactly once (the caller encodes the whole body)."""
    if body.get(key) is not PLACEHOLDER:
        return None
    encoded = encoder.encode(body)
    head, found, tail = encoded.partition(_MARK)
    if not found or _MARK in tail:
        return None
    out = [head, b"["]
    for piece in pieces:
        if piece:
            if len(out) > 2:
                out.append(b",")
            out.append(piece)
    out.append(b"]")
    out.append(tail)
    return b"".join(out)
