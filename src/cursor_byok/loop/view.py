"""The active history as a view over the append-only log.

Nothing a conversation committed is ever deleted or changed: the store appends each message as
a row and keeps it. What the model sees (`ConversationState.messages`) is a view over that log,
a list of spans: the log positions `[start, end)` of each span, in order; the last span is open
(`end` None) and takes every message appended from then on.

- A new conversation: one open span from 0, the whole log.
- A rewind to turn k: the spans of the view as it was at the end of turn k (each closed at the
  log length of that moment), then an open span from the current log length. The messages of
  the abandoned turns stay in the log, outside the view.
- A compaction epoch (the compaction issue) is the same thing: the span of the summary message,
  the span of the kept tail, then an open span. A rewind to a turn before a compaction restores
  that turn's view: the history as it was then, not summarized (nothing was deleted).

Views are small (one span, a few after rewinds or compactions) and plain data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import msgspec

T = TypeVar("T")


class Span(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """Log positions `[start, end)`; `end` None: open, up to the end of the log."""

    start: int
    end: int | None = None


WHOLE_LOG: tuple[Span, ...] = (Span(0),)


def materialize(view: Sequence[Span], log: tuple[T, ...]) -> tuple[T, ...]:
    """The items of `log` the view selects, in view order (the log itself when it is whole)."""
    if len(view) == 1 and view[0].start == 0 and view[0].end is None:
        return log
    out: list[T] = []
    for span in view:
        out.extend(log[span.start : span.end])
    return tuple(out)


def closed(view: Sequence[Span], log_length: int) -> tuple[Span, ...]:
    """The view with its open span closed at `log_length`: what it selects right now, kept
    exact when more messages are appended later (a turn mark records this)."""
    return tuple(
        Span(s.start, log_length if s.end is None else s.end)
        for s in view
        if (log_length if s.end is None else s.end) > s.start
    )


def reopened(view: Sequence[Span], log_length: int) -> tuple[Span, ...]:
    """`view` (closed spans) followed by an open span from `log_length`: a restored view that
    takes the messages appended from now on."""
    if view and view[-1].end == log_length:  # extend the last span instead of adding one
        return (*view[:-1], Span(view[-1].start))
    return (*view, Span(log_length))


def problem(view: Sequence[Span], log_length: int) -> str | None:
    """Why `view` cannot select from a log of `log_length` messages, or None."""
    if not view:
        return "the view is empty"
    for s in view:
        end = log_length if s.end is None else s.end
        if s.start < 0 or end < s.start or end > log_length:
            return f"span [{s.start}, {s.end}) is outside a log of {log_length} messages"
    return None


def length(view: Sequence[Span], log_length: int) -> int:
    """How many messages the view selects."""
    return sum((log_length if s.end is None else s.end) - s.start for s in view)


def is_prefix(head: Sequence[Span], view: Sequence[Span]) -> bool:
    """Whether the closed view `head` selects a prefix of what the closed view `view` selects,
    span by span: a turn that ended earlier on the same branch of the history."""
    if len(head) > len(view) or not head:
        return not head
    *whole, last = head
    if list(whole) != list(view[: len(whole)]):
        return False
    other = view[len(whole)]
    last_end = last.end if last.end is not None else -1
    other_end = other.end if other.end is not None else -1
    return last.start == other.start and last_end <= other_end


def suffix(view: Sequence[Span], log_length: int, index: int) -> tuple[Span, ...]:
    """Closed spans selecting what `view` selects from its `index`-th message on (the kept tail
    of a compaction, as log positions)."""
    out: list[Span] = []
    skip = index
    for s in closed(view, log_length):
        assert s.end is not None
        size = s.end - s.start
        if skip >= size:
            skip -= size
            continue
        out.append(Span(s.start + skip, s.end))
        skip = 0
    return tuple(out)
