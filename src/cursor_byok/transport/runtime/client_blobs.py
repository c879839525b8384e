"""Blobs already fetched from clients, by id, so a turn does not ask for them again.

The IDE sends its rules, skills, subagents and MCP servers as blob ids
(`request_context_parts`), and every turn the server had to ask the client for each of them,
one round trip after the other, before the model call: four round trips per turn over what
may be a remote link. A blob id is the SHA-256 of its bytes (protocol §2.6), so bytes that
hash to their id are that blob for every run; bytes that do not (a client with other ids)
are used for the run that fetched them and not kept.

Kept per person (`scoped`): a run made under a person's token finds only what that
person's runs fetched (the operator's runs, what the operator's fetched), so one person's
rules and skills never reach another's run through the cache, even by an id seen somewhere.
Bounded in bytes over every person, least recently used first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Protocol

MAX_BYTES = 16 * 1024 * 1024


class BlobCache(Protocol):
    """What a run reads and fills: the blobs of one person (ClientBlobs.scoped)."""

    def get(self, blob_id: bytes) -> bytes | None: ...

    def put(self, blob_id: bytes, data: bytes) -> bool: ...


class ClientBlobs:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._blobs: OrderedDict[tuple[str, bytes], bytes] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._blobs)

    @property
    def size(self) -> int:
        return self._bytes

    def scoped(self, person: str | None) -> BlobCache:
        """The blobs of `person` (None: the operator's)."""
        return _Scoped(self, person or "")

    def get(self, blob_id: bytes, scope: str = "") -> bytes | None:
        key = (scope, blob_id)
        data = self._blobs.get(key)
        if data is None:
            self.misses += 1
        else:
            self._blobs.move_to_end(key)
            self.hits += 1
        return data

    def put(self, blob_id: bytes, data: bytes, scope: str = "") -> bool:
        """Keep `data` if it is the blob `blob_id` names; True when kept."""
        if len(data) > self.max_bytes or hashlib.sha256(data).digest() != blob_id:
            return False
        key = (scope, blob_id)
        if key in self._blobs:
            self._blobs.move_to_end(key)
            return True
        self._blobs[key] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, dropped = self._blobs.popitem(last=False)
            self._bytes -= len(dropped)
        return True


class _Scoped:
    def __init__(self, blobs: ClientBlobs, scope: str) -> None:
        self._blobs = blobs
        self._scope = scope

    def get(self, blob_id: bytes) -> bytes | None:
        return self._blobs.get(blob_id, self._scope)

    def put(self, blob_id: bytes, data: bytes) -> bool:
        return self._blobs.put(blob_id, data, self._scope)
