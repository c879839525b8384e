"""Per conversation, the body of its last committed model call: the base the next call's stored
request is a delta on (stored_request.py). Least recently used first, bounded in bytes; a
conversation whose base was dropped stores its next request whole."""

from __future__ import annotations

from collections import OrderedDict

from .stored_request import RequestBase

MAX_BYTES = 64 * 1024 * 1024


class RequestBases:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._bases: OrderedDict[str, RequestBase] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._bases)

    @property
    def size(self) -> int:
        return self._bytes

    def get(self, conversation_id: str) -> RequestBase | None:
        base = self._bases.get(conversation_id)
        if base is None:
            self.misses += 1
        else:
            self._bases.move_to_end(conversation_id)
            self.hits += 1
        return base

    def remember(self, conversation_id: str, base: RequestBase) -> None:
        """Keep `base` (a committed call's request) for the conversation's next call."""
        old = self._bases.pop(conversation_id, None)
        if old is not None:
            self._bytes -= len(old.body)
        self._bases[conversation_id] = base
        self._bytes += len(base.body)
        while self._bytes > self.max_bytes and len(self._bases) > 1:
            _, dropped = self._bases.popitem(last=False)
            self._bytes -= len(dropped.body)
