"""The history work of a long session's turn, alone: the Chat adapter's body and the history
hash for a turn's two model calls, as the history grows (not a benchmark: no server; its name
starts with `_`). One turn appends four messages (user, assistant with a Read call, a 1 KB
result, assistant), as bench/long_tool_session.py's do.

    .venv/bin/python bench/_history_work.py          # this tree
    <baseline venv>/bin/python bench/_history_work.py  # another tree (bench/_baseline.py)

Prints the process CPU per turn (µs, 60 turns a size, the GC on) at 200..2,000 messages and
the least-squares growth per 100 messages: what the folds (llm/prefix_memo.py) and the body's
join cost per turn, without the run's other work and its noise.
"""

from __future__ import annotations

import time

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.types import (
    AssistantMessage,
    Message,
    RequestMessages,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

SIZES = (200, 400, 800, 1200, 1600, 2000)
TURNS = 60


def _turn(k: int) -> list[Message]:
    call = ToolCall(id=f"call_{k}", name="Read", arguments={"path": f"/f{k}.py"})
    return [
        UserMessage(content=(TextContent(text=f"[tool Read] {k}"),)),
        AssistantMessage(
            content=(TextContent(text="Let me check."), call),
            api="openai-chat",
            provider="p",
            model="m",
        ),
        ToolResultMessage(
            tool_call_id=call.id, tool_name="Read", content=(TextContent(text="x" * 1024),)
        ),
        AssistantMessage(
            content=(TextContent(text="It says " + "y" * 40),),
            api="openai-chat",
            provider="p",
            model="m",
        ),
    ]


def main() -> None:
    provider = ProviderSettings(
        name="p", api="openai-chat", base_url="http://127.0.0.1:1/v1", api_key="k"
    )
    adapter = OpenAIChatAdapter(provider)
    settings = ModelSettings(model="m")

    def call(history: tuple[Message, ...]) -> None:
        adapter.prepare(RequestMessages("sys", history), settings)
        messages_hash(history)

    history: tuple[Message, ...] = ()
    per_turn: dict[int, float] = {}
    k = 0
    for size in SIZES:
        while len(history) < size:
            history = (*history, *_turn(k))
            k += 1
            call(history)
        start = time.process_time()
        for _ in range(TURNS):
            new = _turn(k)
            k += 1
            history = (*history, *new[:3])
            call(history)  # the call after the tool result
            history = (*history, new[3])
            call(history)  # the next turn's first call sees the answer too
        per_turn[size] = (time.process_time() - start) / TURNS * 1e6
    mx = sum(SIZES) / len(SIZES)
    my = sum(per_turn.values()) / len(SIZES)
    slope = sum((x - mx) * (per_turn[x] - my) for x in SIZES) / sum((x - mx) ** 2 for x in SIZES)
    print(" ".join(f"{size}: {us:.0f} µs" for size, us in per_turn.items()))
    print(f"per 100 more messages: {slope * 100:+.1f} µs per turn")


if __name__ == "__main__":
    main()
