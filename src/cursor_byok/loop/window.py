"""The window rule: one formula deciding whether the next request goes out as it is, is
compacted first, or is refused, and how much room a compaction's summary and kept tail get.

With W the model's window (the configured `context_window`, or the smaller one its provider
reported), R the answer reserve, M = min(R, MIN_OUTPUT_RESERVE) the least room an answer may
have, T = threshold x W and P the estimated prompt (compaction.estimated_tokens):

- P + R <= T: the request goes out.
- P + R > T: compact first, when something before the latest turn can be summarized and no
  compaction ran for this call already.
- otherwise it goes out when P + M <= W, and is refused when P + M > W (the message gives the
  three parts and their sum, which is more than W).

A compaction's new request is F + H + S + K (the fixed part, the summary's framing, the
summary, the kept tail). Its room is first what keeps it below the threshold (T - R - F - H),
else what still fits (W - M - F - H); the summary gets at most half of that room (and at most
the summarizing model's own answer bound, `summary_output`), the tail the rest. A compaction
model with another window and output limit changes only `summary_output` and the summary
request's own trim (its window less its answer bound): the room above is the main model's.

The provider's window: when the provider refuses a request as too long and gives its window
(`ContextLimit`, read by each adapter), W becomes the smaller of that and the configured one
(`provider_tokens`; the runtime keeps it per model for the process) and the compaction plans
for it. When it also gives its count of the refused request and that is above the estimate,
the plan counts every estimated token as count / estimate tokens (`scale`), so the compacted
request fits the provider's own count. A success whose usage is over W (a silent overflow:
the provider truncated, or the window is misjudged) changes nothing here: its usage is the
next estimate, so the next call compacts first; both are reported (`WindowReport`).
"""

from __future__ import annotations

import msgspec
import msgspec.structs

from cursor_byok.llm.events import ContextLimit

from .context import MIN_OUTPUT_RESERVE, ContextWindow

# A summary shorter than this (or than the summarizing model's own bound) is not worth a
# compaction call.
MIN_SUMMARY_TOKENS = 256
# The most provider tokens per estimated token a refusal's count is trusted for: about one
# token per character (CJK text) against the estimate's four characters.
MAX_SCALE = 4.0
# The summary message's framing (compaction.SUMMARY_HEADER and the message's own), in tokens.
SUMMARY_FRAMING_TOKENS = 64


def shown(window: ContextWindow | None, configured: int) -> int:
    """The window the IDE's context meter shows: W, the one these decisions use (the
    provider's when it reported a smaller one), `configured` for a turn without a budget."""
    return window.size if window is not None else configured


def over_threshold(window: ContextWindow, prompt: int) -> bool:
    """P + R > T: compact first, when something can be summarized."""
    return prompt + window.reserve > window.limit


def fits(window: ContextWindow, prompt: int) -> bool:
    """P + M <= W: the request may go out at all."""
    return prompt + window.min_reserve <= window.size


class Refusal(msgspec.Struct, frozen=True):
    """A request that does not fit even after compaction: the parts of P + M, for the error."""

    window: int
    fixed: int
    rest: int
    answer: int

    def message(self) -> str:
        total = self.fixed + self.rest + self.answer
        return (
            f"this conversation cannot be compacted to fit the model's context window of "
            f"{self.window:,} tokens: the system prompt, rules and tools take about "
            f"{self.fixed:,} tokens, the messages that must stay about {self.rest:,} and the "
            f"answer at least {self.answer:,}, {total:,} in all. Shorten the last message or "
            "the rules, switch tools off, or use a model with a larger window."
        )


def refusal(window: ContextWindow, fixed: int, prompt: int) -> Refusal:
    return Refusal(
        window=window.size,
        fixed=min(fixed, prompt),
        rest=max(prompt - fixed, 0),
        answer=window.min_reserve,
    )


class Room(msgspec.Struct, frozen=True):
    """What a compaction may give the summary (`summary`) and the kept tail (`tail`)."""

    summary: int
    tail: int


def rooms(window: ContextWindow, fixed: int) -> list[Room]:
    """The rooms to try, in order: below the threshold, then within the window."""
    framing = fixed + SUMMARY_FRAMING_TOKENS
    out: list[Room] = []
    for room in (
        window.limit - window.reserve - framing,
        window.size - window.min_reserve - framing,
    ):
        summary = min(window.summary_output, room // 2)
        if summary >= min(MIN_SUMMARY_TOKENS, window.summary_output):
            out.append(Room(summary=summary, tail=room - summary))
    return out


def summary_room(window: ContextWindow, fixed: int, tail: int) -> int:
    """The summary's bound for a cut already chosen (a /summarize): what the room left after
    the tail allows, within the summarizing model's bound; at least MIN_SUMMARY_TOKENS."""
    room = window.size - window.min_reserve - fixed - SUMMARY_FRAMING_TOKENS - tail
    return max(
        min(window.summary_output, room // 2), min(MIN_SUMMARY_TOKENS, window.summary_output)
    )


def with_provider_window(window: ContextWindow, limit: ContextLimit | None) -> ContextWindow:
    """`window` with the window a provider reported, when that is smaller than the one the
    loop decided by (else `window` itself)."""
    if limit is None or limit.window <= 0 or limit.window >= window.size:
        return window
    return msgspec.structs.replace(window, provider_tokens=limit.window)


def scale(limit: ContextLimit | None, estimate: int) -> float:
    """Provider tokens per estimated token, from a refused request's count: at least 1, at
    most MAX_SCALE (past it the count is not this request's, or the estimate is broken)."""
    if limit is None or limit.prompt <= estimate or estimate <= 0:
        return 1.0
    return min(limit.prompt / estimate, MAX_SCALE)


def silently_over(window: ContextWindow, used: int) -> bool:
    """A success whose usage is over the window (the provider truncated or the window is
    misjudged)."""
    return used > window.size


__all__ = [
    "MIN_OUTPUT_RESERVE",
    "MIN_SUMMARY_TOKENS",
    "SUMMARY_FRAMING_TOKENS",
    "Refusal",
    "Room",
    "fits",
    "over_threshold",
    "refusal",
    "rooms",
    "scale",
    "shown",
    "silently_over",
    "summary_room",
    "with_provider_window",
]
