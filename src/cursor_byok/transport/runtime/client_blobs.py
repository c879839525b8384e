"""Blobs already fetched from clients, by id, so a turn does not ask for them again.

The IDE sends its rules, skills, subagents and MCP servers as blob ids
(`request_context_parts`), and every turn the server had to ask the client for each of them,
one round trip after the other, before the model call: four round trips per turn over what
may be a remote link. A blob id is the SHA-256 of its bytes (protocol §2.6), so bytes that
hash to their id are that blob for every run; bytes that do not (a client with other ids)
are used for the run that fetched them and not kept.

Kept for any run that names the id: a client can only name a blob by its hash, which it
cannot know without having the bytes or seeing the id, and every client of one server holds
the same credentials. Bounded in bytes, least recently used first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

MAX_BYTES = 16 * 1024 * 1024


class ClientBlobs:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._blobs: OrderedDict[bytes, bytes] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._blobs)

    @property
    def size(self) -> int:
        return self._bytes

    def get(self, blob_id: bytes) -> bytes | None:
        data = self._blobs.get(blob_id)
        if data is None:
            self.misses += 1
        else:
            self._blobs.move_to_end(blob_id)
            self.hits += 1
        return data

    def put(self, blob_id: bytes, data: bytes) -> bool:
        """Keep `data` if it is the blob `blob_id` names; True when kept."""
        if len(data) > self.max_bytes or hashlib.sha256(data).digest() != blob_id:
            return False
        if blob_id in self._blobs:
            self._blobs.move_to_end(blob_id)
            return True
        self._blobs[blob_id] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes:
            _, dropped = self._blobs.popitem(last=False)
            self._bytes -= len(dropped)
        return True
