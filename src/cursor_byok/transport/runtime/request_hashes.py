"""The SHA-256 of a conversation's upstream requests, continued over the bytes a request
shares with the conversation's previous one.

Each model call's request is stored with the hash of its body (records.planned_call), and a
conversation's consecutive requests share most of their bytes: within a compaction epoch the
history only grows, so the next body repeats the previous one up to where its history ended
(then come the new messages and the part after the history: tools, options). Hashing the whole
body again cost about 15 instructions a byte, a pass over the whole history per call
(issue 28: the largest C cost of a long session after the body's encoding).

So the hash state is kept every `STEP` bytes of the last body hashed per conversation. The
next body resumes from the last kept state whose offset it provably shares: its bytes up to
that offset are compared with the previous body's (one memcmp, about 1/60 of hashing them).
A body that shares nothing (another model, a compaction) is hashed whole, as before. The
digest is always SHA-256 over exactly the body's bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import OrderedDict
from typing import Any

STEP = 16 * 1024  # bytes between kept states (a state is about 200 bytes)
MAX_CONVERSATIONS = 64
MAX_BYTES = 64 * 1024 * 1024  # bodies kept together, at most
_PROBE = 64  # bytes just before a candidate offset compared first (a cheap reject)


class _Kept:
    __slots__ = ("body", "states")

    def __init__(self, body: bytes, states: list[Any]) -> None:
        self.body = body
        self.states = states  # states[k]: the hash of body[: k * STEP], never updated again


class RequestHashes:
    def __init__(
        self, max_conversations: int = MAX_CONVERSATIONS, max_bytes: int = MAX_BYTES
    ) -> None:
        self.max_conversations = max_conversations
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._bytes = 0
        self.resumed_bytes = 0  # bytes not hashed again (for tests and benchmarks)

    def hexdigest(self, body: bytes, key: str) -> str:
        kept = self._kept.get(key)
        start, states = 0, [hashlib.sha256()]
        if kept is not None:
            start = self._shared(kept, body)
            states = kept.states[: start // STEP + 1]
        h = states[-1].copy()
        self.resumed_bytes += start
        offset = start
        data = memoryview(body)
        while offset + STEP <= len(body):
            h.update(data[offset : offset + STEP])
            offset += STEP
            states.append(h.copy())
        h.update(data[offset:])
        self._keep(key, _Kept(body, states))
        return h.hexdigest()

    def _shared(self, kept: _Kept, body: bytes) -> int:
        """The largest kept offset up to which `body` equals the kept body (0: none)."""
        previous = kept.body
        view = memoryview(previous)  # compared in place: a slice of bytes is a copy
        limit = min(len(previous), len(body))
        for k in range(min(len(kept.states) - 1, limit // STEP), 0, -1):
            end = k * STEP
            if body[end - _PROBE : end] != previous[end - _PROBE : end]:
                continue
            if body.startswith(view[:end]):
                return end
        return 0

    def _keep(self, key: str, kept: _Kept) -> None:
        old = self._kept.pop(key, None)
        if old is not None:
            self._bytes -= len(old.body)
        self._kept[key] = kept
        self._bytes += len(kept.body)
        while self._kept and (
            len(self._kept) > self.max_conversations or self._bytes > self.max_bytes
        ):
            with contextlib.suppress(KeyError):
                _, dropped = self._kept.popitem(last=False)
                self._bytes -= len(dropped.body)

    def forget(self, key: str) -> None:
        old = self._kept.pop(key, None)
        if old is not None:
            self._bytes -= len(old.body)


__all__ = ["STEP", "RequestHashes"]
