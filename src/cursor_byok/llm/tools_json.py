"""A request's tool list as JSON, encoded once per tools tuple.

The loop hands every call of a process the same tuple for the same mode and switches
(loop/prompt.py `render_tools`), and the tool list is most of a short request's body (15
schemas, about 15 KB): encoded on every call it was the largest single encode of a turn
(issue 28). An adapter keeps the encoding by the tuple's identity and splices it into the body
as `msgspec.Raw`: the same bytes as encoding the converted list, without building and walking
it again. The memo holds each tuple it keys, so no other object can take its id meanwhile.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec

from .types import ToolDefinition

MAX_ENTRIES = 64


class ToolsJson:
    """`convert(tool)` for each tool of a tuple, encoded as one JSON array, once per tuple."""

    def __init__(
        self, convert: Callable[[ToolDefinition], Any], max_entries: int = MAX_ENTRIES
    ) -> None:
        self._convert = convert
        self._max = max_entries
        self._entries: OrderedDict[int, tuple[tuple[ToolDefinition, ...], msgspec.Raw]] = (
            OrderedDict()
        )

    def __call__(self, tools: tuple[ToolDefinition, ...]) -> msgspec.Raw:
        slot = id(tools)
        entry = self._entries.get(slot)
        if entry is not None and entry[0] is tools:
            with contextlib.suppress(KeyError):  # dropped meanwhile by another thread
                self._entries.move_to_end(slot)
            return entry[1]
        raw = msgspec.Raw(msgspec.json.encode([self._convert(t) for t in tools]))
        self._entries[slot] = (tools, raw)
        while len(self._entries) > self._max:
            try:
                self._entries.popitem(last=False)
            except KeyError:
                break
        return raw


__all__ = ["ToolsJson"]
