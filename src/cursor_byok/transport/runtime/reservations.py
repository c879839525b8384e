"""A person token's budget and rate, held across processes: each model call reserves an upper
bound of its cost in the commit that plans it (store.api.Reservation), and settles to its real
cost when it finishes (the cost stored with the call replaces the reservation in the sum).

The bound is computed from what the call can cost at most: its request body (at most one
token per `BYTES_PER_TOKEN` bytes, and never more than the model's context window) at the
dearest of the model's input prices, plus its output cap (the model's `max_output_tokens`,
else its whole window) at the output price. So concurrent calls of one person, from any
process or replica, can together never spend more than the budget while the providers keep
to those caps; the cost of a call is the one stored with it (llm/models.py prices, written
once when its usage is known).

The rate (model calls per minute) is counted in the same step from the person's calls planned
in the last 60 s, so it too holds across processes. The store adds up and compares; these
functions say what to ask for and, when the store refuses, in which words.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ...llm.models import Model, usd
from ...llm.stream import PreparedRequest
from ...loop import Limit
from ...store.api import AccessTokenRecord, Reservation, ReservationTotals

BYTES_PER_TOKEN = 3  # a tokenizer makes at most about one token of every 3 bytes of a body
RATE_WINDOW_MS = 60_000


def month_window(now_ms: int) -> tuple[int, int, str]:
    """The UTC calendar month holding `now_ms`: [start, end) in ms and its name (2026-12)."""
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    end = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000), f"{now:%Y-%m}"


def call_bound_usd(model: Model, prepared: PreparedRequest, bound: int = 0) -> float:
    """The most the request `prepared` can cost on `model` (0 for a model without prices);
    `bound`: the call's own answer bound when the loop set one below the model's (a
    summary's, an image's description), else 0."""
    prices = model.prices
    if prices is None:
        return 0.0
    window = max(model.context_window, 1)
    input_tokens = min(-(-len(prepared.body) // BYTES_PER_TOKEN), window)
    output_tokens = model.settings.max_output_tokens or window
    if 0 < bound < output_tokens:
        output_tokens = bound
    per_input = max(prices.input, prices.cache_read, prices.cache_write)
    return (input_tokens * per_input + output_tokens * prices.output) / 1_000_000


def reservation(
    record: AccessTokenRecord,
    model: Model,
    prepared: PreparedRequest,
    now_ms: int,
    bound: int = 0,
) -> Reservation | None:
    """What the commit planning a call of `record`'s person asks of its limits (None: the
    token has neither a budget nor a rate); `bound`: the call's own answer bound (0: none)."""
    if record.budget_usd is None and record.rpm is None:
        return None
    start, end, _ = month_window(now_ms)
    return Reservation(
        token_id=record.token_id,
        amount_usd=(
            call_bound_usd(model, prepared, bound) if record.budget_usd is not None else 0.0
        ),
        budget_usd=record.budget_usd,
        since_ms=start,
        until_ms=max(end, now_ms + 1),
        rpm=record.rpm,
        rate_since_ms=now_ms - RATE_WINDOW_MS + 1,
    )


def refusal_words(
    record: AccessTokenRecord, reserve: Reservation, totals: ReservationTotals, now_ms: int
) -> tuple[Limit, str]:
    """Which limit the store's totals refused the reservation by, in words naming it."""
    if totals.refused_by == "rate":
        oldest = totals.oldest_recent_ms if totals.oldest_recent_ms is not None else now_ms
        wait_s = max(1, -(-(oldest + RATE_WINDOW_MS - now_ms) // 1000))
        return Limit.RATE, (
            f"token {record.name!r} is over its rate limit of {record.rpm} model calls per "
            f"minute; try again in {wait_s} s"
        )
    budget = reserve.budget_usd or 0.0
    _, end, month = month_window(now_ms)
    renews = f"it renews on {datetime.fromtimestamp(end / 1000, tz=UTC):%Y-%m-%d}"
    if totals.spent_usd >= budget:
        return Limit.BUDGET, (
            f"token {record.name!r} has spent its monthly budget: {usd(totals.spent_usd)} of "
            f"{usd(budget)} in {month} (UTC); {renews}"
        )
    return Limit.BUDGET, (
        f"token {record.name!r} has too little of its monthly budget left for this model "
        f"call: {usd(totals.spent_usd)} spent and {usd(totals.reserved_usd)} held by calls in "
        f"flight of {usd(budget)} in {month} (UTC), and the call may cost up to "
        f"{usd(reserve.amount_usd)}; {renews}"
    )


__all__ = [
    "BYTES_PER_TOKEN",
    "RATE_WINDOW_MS",
    "call_bound_usd",
    "month_window",
    "refusal_words",
    "reservation",
]
