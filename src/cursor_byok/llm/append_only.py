"""A prefix of an append-only list, shared by copies instead of copied.

A history fold (prefix_memo.py) is copied on every model call, and copying its lists made
each call's CPU grow with the conversation (issue 28): a list of every converted message,
copied and then walked by the cyclic GC as a new young container, twice a turn. `Shared` is
a view of the first `n` items of a list that only grows: a copy is the same list and the
same `n`, O(1), and positions below a view's `n` never change, so a kept fold's view stays
what it was while copies of it append.

Appending puts the item at the end of the list and keeps it when it landed at the view's
own position `n`: the first view to append at a position extends the list in place; a view
whose position was taken by another (a second copy of the same kept fold, a rewound
history) finds another item there and forks a list of its own (`items[:n]` plus its item).
No lock, as for prefix_memo.py: `list.append` and indexing are each atomic under the GIL,
and a view only ever reads positions below its own `n`, which nothing writes again, so
racing threads can only fork (or leave an unused item past their `n`), never read a wrong
item. An item that is the very object at position `n` already is kept either way: the view
then holds what it appended.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Generic, TypeVar, overload

T = TypeVar("T")


class Shared(Generic[T]):
    __slots__ = ("_items", "_n")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._n = 0

    def copy(self) -> Shared[T]:
        other: Shared[T] = Shared.__new__(Shared)
        other._items, other._n = self._items, self._n
        return other

    def append(self, item: T) -> None:
        items, n = self._items, self._n
        items.append(item)
        if items[n] is not item:  # position n held another view's item: fork
            self._items = [*items[:n], item]
        self._n = n + 1

    def extend(self, items: Iterable[T]) -> None:
        for item in items:
            self.append(item)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[T]:
        return islice(self._items, self._n)

    @overload
    def __getitem__(self, key: int) -> T: ...
    @overload
    def __getitem__(self, key: slice) -> list[T]: ...
    def __getitem__(self, key: int | slice) -> T | list[T]:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._n)
            return self._items[start:stop:step]
        index = key + self._n if key < 0 else key
        if not 0 <= index < self._n:
            raise IndexError(key)
        return self._items[index]
