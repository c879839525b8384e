"""`Shared` (llm/append_only.py): copies share one list, yet each reads only what it appended."""

from __future__ import annotations

import threading

import pytest

from cursor_byok.llm.append_only import Shared


def _of(*items: object) -> Shared[object]:
    view: Shared[object] = Shared()
    view.extend(items)
    return view


def test_a_copy_shares_the_list_and_appends_in_place() -> None:
    kept = _of("a", "b")
    copy = kept.copy()
    copy.append("c")
    assert copy._items is kept._items  # extended in place, nothing copied
    assert list(copy) == ["a", "b", "c"]
    assert list(kept) == ["a", "b"] and len(kept) == 2  # the kept view is unchanged


def test_two_copies_of_one_view_each_see_only_their_own_items() -> None:
    kept = _of("a", "b")
    left, right = kept.copy(), kept.copy()
    left.append("left")
    right.append("right")
    right.append("more")
    left.append("left 2")
    assert list(left) == ["a", "b", "left", "left 2"]
    assert list(right) == ["a", "b", "right", "more"]
    assert list(kept) == ["a", "b"]
    assert right[:] == ["a", "b", "right", "more"] and right[2:] == ["right", "more"]
    assert right[-1] == "more" and left[2] == "left"


def test_a_later_copy_of_the_kept_view_forks_past_its_end() -> None:
    kept = _of("a")
    kept.copy().append("first")
    late = kept.copy()
    late.append("second")
    assert list(late) == ["a", "second"]
    assert late._items is not kept._items


def test_indexing_past_the_view_is_an_error_even_when_the_list_is_longer() -> None:
    kept = _of("a")
    kept.copy().append("other")
    with pytest.raises(IndexError):
        kept[1]
    with pytest.raises(IndexError):
        kept[-2]
    assert kept[5:] == [] and kept[:5] == ["a"]


def test_the_same_object_appended_by_two_copies_is_right_for_both() -> None:
    item = object()
    kept = _of("a")
    left, right = kept.copy(), kept.copy()
    left.append(item)
    right.append(item)
    assert list(left) == list(right) == ["a", item]


def test_threads_appending_to_copies_of_one_view_never_read_another_threads_item() -> None:
    kept = _of("base")
    copies = [kept.copy() for _ in range(8)]
    start = threading.Barrier(len(copies))

    def run(k: int) -> None:
        start.wait()
        for i in range(2000):
            copies[k].append((k, i))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(copies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k, view in enumerate(copies):
        assert list(view) == ["base", *((k, i) for i in range(2000))]
    assert list(kept) == ["base"]
