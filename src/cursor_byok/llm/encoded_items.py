"""A history fold's provider items as JSON, each encoded once, and the body spliced from them.

Every model call of a conversation sends the whole history, and encoding the whole body each
time made a call's CPU grow with the conversation (issue 28). A history fold (prefix_memo.py)
builds each provider item once and shares it with later calls; `EncodedItems` keeps each
item's JSON beside it, encoded when the fold built it, and a comma-joined run of them kept
from an earlier call, so the next call's body joins that run and what came after it (one
contiguous copy of the history, made by the body's own join) instead of encoding or walking
every item again.

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
# items past the kept join before `runs` extends it (the runs of a call stay this short)
REJOIN_AFTER = 32


class EncodedItems:
    """The JSON of a fold's items, in order, and their join up to some count, kept for the
    next call. Copied with its fold (the pieces shared, not copied: append_only.py); the join
    is a pure function of the items, so computing it on a kept fold only caches what any copy
    would compute. The join and its count are one tuple, set in one store: a thread copying
    the fold while another extends its join reads one consistent pair."""

    __slots__ = ("_join", "parts")

    def __init__(self) -> None:
        self.parts: Shared[bytes] = Shared()  # shared with copies (append_only.py)
        self._join: tuple[bytes, int] = (b"", 0)  # (b",".join(parts[:count]), count)

    def copy(self) -> EncodedItems:
        other = EncodedItems.__new__(EncodedItems)
        other.parts = self.parts.copy()
        other._join = self._join
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
        joined, kept = self._join
        if n == kept:
            return joined
        if 0 < kept < n:
            joined = b",".join([joined, *self.parts[kept:n]])
        else:
            joined = b",".join(self.parts[:n])
        self._join = (joined, n)
        return joined

    def runs(self, count: int | None = None) -> list[bytes]:
        """`joined(count)` as comma-joinable runs: the kept join and the items after it, so
        the body's own join is the one copy of the history a call makes. The kept join is
        extended once `REJOIN_AFTER` items lie past it (a copy every few calls, not two a
        call), and joined again when it covers more than `count`."""
        n = len(self.parts) if count is None else count
        joined, kept = self._join
        if 0 < kept <= n and n - kept < REJOIN_AFTER:
            return [joined, *self.parts[kept:n]] if kept < n else [joined]
        return [self.joined(n)]


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
