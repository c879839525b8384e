"""Cost of `transition` per streaming event, against history length and response length.

Prints a markdown table. Each figure is the best of several runs of the mean CPU time per event
(process_time, so other processes on the machine disturb it less); the sizes compared are
measured in turn within each run. The loop is O(1) per streamed event when both ratios stay near 1
(the limit is 1.5).

    .venv/bin/python bench/loop_transition.py
"""

from __future__ import annotations

import platform
import sys
import time

import msgspec

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.events import DoneEvent, StartEvent, TextDelta, TextEnd, TextStart
from cursor_byok.llm.types import AssistantMessage, Message, TextContent, UserMessage
from cursor_byok.loop import AwaitLLM, ConversationState, LLMEvent, RuntimeState, transition

CALL = "bench:1:llm1"
EVENTS = 20_000
REPEATS = 7
LIMIT = 1.5


def history(n: int) -> tuple[Message, ...]:
    out: list[Message] = []
    for i in range(n):
        if i % 2 == 0:
            out.append(UserMessage.of_text(f"question {i} " * 8))
        else:
            out.append(
                AssistantMessage(
                    content=(TextContent(text=f"answer {i} " * 16),),
                    api="faux",
                    provider="faux",
                    model="m",
                )
            )
    return tuple(out)


def streaming_state(prior_messages: int, prior_deltas: int) -> RuntimeState:
    """WaitingLLM over `prior_messages` messages, with one text block already streamed
    `prior_deltas` deltas long."""
    messages = history(prior_messages)
    c = msgspec.structs.replace(
        ConversationState.new("bench"),
        turn=1,
        turn_id="bench:1",
        llm_calls=1,
        messages=messages,
        status="WaitingLLM",
        waiting=AwaitLLM(call_id=CALL, messages_hash=messages_hash(messages)),
    )
    state = RuntimeState.of(c)
    state = transition(state, LLMEvent(call_id=CALL, event=StartEvent())).state
    state = transition(state, LLMEvent(call_id=CALL, event=TextStart(content_index=0))).state
    delta = LLMEvent(call_id=CALL, event=TextDelta(content_index=0, delta="tok "))
    for _ in range(prior_deltas):
        state = transition(state, delta).state
    return state


def per_delta(*states: RuntimeState) -> list[float]:
    """Best-of-REPEATS mean seconds per TextDelta transition, for each state. The states are
    measured in turn within each repeat, so a change of machine load hits all of them alike."""
    delta = LLMEvent(call_id=CALL, event=TextDelta(content_index=0, delta="tok "))
    best = [float("inf")] * len(states)
    for _ in range(REPEATS):
        for i, state in enumerate(states):
            s = state
            t0 = time.process_time()
            for _ in range(EVENTS):
                s = transition(s, delta).state
            best[i] = min(best[i], (time.process_time() - t0) / EVENTS)
    return best


def per_response_event(*prior_messages: int, deltas: int = 200) -> list[float]:
    """Mean seconds per event over a whole response (start, text, deltas, end, done): includes
    the one O(history) append at done, amortized over the response's events."""
    bases = [RuntimeState.of(streaming_state(n, 0).committed) for n in prior_messages]
    message = AssistantMessage(
        content=(TextContent(text="tok " * deltas),), api="faux", provider="faux", model="m"
    )
    inputs = [
        LLMEvent(call_id=CALL, event=StartEvent()),
        LLMEvent(call_id=CALL, event=TextStart(content_index=0)),
        *[LLMEvent(call_id=CALL, event=TextDelta(content_index=0, delta="tok "))] * deltas,
        LLMEvent(call_id=CALL, event=TextEnd(content_index=0, content="tok " * deltas)),
        LLMEvent(call_id=CALL, event=DoneEvent(reason="stop", message=message)),
    ]
    best = [float("inf")] * len(bases)
    for _ in range(REPEATS * 20):
        for i, base in enumerate(bases):
            s = base
            t0 = time.process_time()
            for item in inputs:
                s = transition(s, item).state
            best[i] = min(best[i], (time.process_time() - t0) / len(inputs))
            assert s.committed.status == "Final"
    return best


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} µs"


def main() -> int:
    rows: list[tuple[str, float, float, str, str]] = []
    a, b = per_delta(streaming_state(10, 10), streaming_state(10_000, 10))
    rows.append(("text_delta vs prior messages", a, b, "10", "10,000"))
    c, d = per_delta(streaming_state(10, 10), streaming_state(10, 20_000))
    rows.append(("text_delta vs prior deltas of the response", c, d, "10", "20,000"))
    e, f = per_response_event(10, 10_000)
    rows.append(("whole response (204 events, incl. done) vs prior messages", e, f, "10", "10,000"))

    print(f"Python {platform.python_version()} on {platform.machine()}, {EVENTS:,} events per run,")
    print(f"best of {REPEATS} runs; limit on the first two ratios: {LIMIT}.\n")
    print("| measurement | small | per event | large | per event | ratio |")
    print("|---|---|---|---|---|---|")
    failed = False
    for i, (name, small, large, small_label, large_label) in enumerate(rows):
        ratio = large / small
        if i < 2 and ratio > LIMIT:
            failed = True
        print(
            f"| {name} | {small_label} | {us(small)} | {large_label} | {us(large)} | {ratio:.2f} |"
        )
    if failed:
        print("\nFAIL: a per-event ratio is above the limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
