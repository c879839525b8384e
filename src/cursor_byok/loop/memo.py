"""Values derived from an immutable object, kept by the object's identity.

A run's `TurnContext` is one object for the whole run, and every model call, checkpoint meter
and compaction estimate renders the same system prompt and tool definitions from it and
measures them again (issue 28: 30 tool schemas encoded several times a turn). Derived once, a
value is found again by the identity of what it came from, never by equality (equal contexts
are rare and cheap to render again; equality would walk the whole context). The memo holds a
reference to each key, so no other object can take its id while it is kept. Bounded by count,
least recently used first. Deterministic: a hit returns what the function gives.

`ByValue` is the other half: a value derived from a few small hashable fields of an object
(a context's mode and switches, not its whole self), so that equal fields in another object
(the next run's context, decoded afresh) get the very same derived object back, and every
identity memo keyed on that object hits too.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

MAX_ENTRIES = 256


class ByIdentity(Generic[K, V]):
    """`derive(key)`, computed once per key object (`key` must never change)."""

    def __init__(self, derive: Callable[[K], V], max_entries: int = MAX_ENTRIES) -> None:
        self._derive = derive
        self._max = max_entries
        self._entries: OrderedDict[int, tuple[K, V]] = OrderedDict()

    def __call__(self, key: K) -> V:
        slot = id(key)
        entry = self._entries.get(slot)
        if entry is not None and entry[0] is key:
            with contextlib.suppress(KeyError):  # dropped meanwhile by another thread
                self._entries.move_to_end(slot)
            return entry[1]
        value = self._derive(key)
        self._entries[slot] = (key, value)
        while len(self._entries) > self._max:
            try:
                self._entries.popitem(last=False)
            except KeyError:
                break
        return value

    def keep(self, key: K, value: V) -> None:
        """Keep `value` as what `derive(key)` gives (known already where `key` was made)."""
        self._entries[id(key)] = (key, value)
        while len(self._entries) > self._max:
            try:
                self._entries.popitem(last=False)
            except KeyError:
                break

    def clear(self) -> None:
        self._entries.clear()


class ByValue(Generic[K, V]):
    """`derive(obj)`, computed once per value of `key(obj)` (a hashable tuple of the fields
    `derive` reads; None or an unhashable key: derived every time, nothing kept)."""

    def __init__(
        self,
        derive: Callable[[K], V],
        key: Callable[[K], object],
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._derive = derive
        self._key = key
        self._max = max_entries
        self._entries: OrderedDict[object, V] = OrderedDict()

    def __call__(self, obj: K) -> V:
        key = self._key(obj)
        if key is None:
            return self._derive(obj)
        try:
            found = self._entries.get(key)
        except TypeError:  # a field that holds an unhashable value
            return self._derive(obj)
        if found is not None:
            return found
        value = self._derive(obj)
        self._entries[key] = value
        while len(self._entries) > self._max:
            try:
                self._entries.popitem(last=False)
            except KeyError:
                break
        return value

    def clear(self) -> None:
        self._entries.clear()


__all__ = ["ByIdentity", "ByValue"]
