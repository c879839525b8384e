"""What storing each model call's exact request costs, whole against as a delta.

    .venv/bin/python bench/stored_requests.py [--calls 120]

An agent conversation built with the real adapters (OpenAI Chat Completions and Anthropic
Messages): a 9 KB system prompt, 10 tools, then one call per tool round trip (an assistant
tool call and a file-sized result, every 15th result a 20 KB build log), so the prompt grows
to a few hundred KB. For every call it times, on this thread as the runner does before the
call, the two stored forms: the whole request (msgpack, zlib level 1 from 32 KiB on: the form
before deltas) and `stored_request.encode_request` (a delta on the previous call's body), and
it counts the bytes each form stores. Then it rebuilds the last call from its chain of
deltas. Exits 1 if a rebuilt request differs from the bytes sent.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import time

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.stream import PreparedRequest
from cursor_byok.llm.types import (
    AssistantMessage,
    Message,
    RequestMessages,
    TextContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)
from cursor_byok.transport.runtime.stored_request import (
    RequestBase,
    encode_request,
    encode_whole,
    load_request,
)

SYSTEM = "".join(
    f"Rule {i}: prefer small, reviewed changes; explain what you run and why.\n" for i in range(130)
)
TOOLS = tuple(
    ToolDefinition(
        name=name,
        description=f"{name}: " + "what it does, its limits and its arguments. " * 12,
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}},
            "required": ["path"],
        },
    )
    for name in ("Shell", "Read", "Write", "StrReplace", "Delete", "LS", "Grep", "Glob", "A", "B")
)


def file_text(i: int) -> str:
    if i % 15 == 14:
        return "".join(f"[{j:05d}] compiling module_{j} ... ok\n" for j in range(600))
    return "".join(f"def function_{i}_{j}(value):\n    return value * {j}\n" for j in range(40))


def conversation(calls: int, api: str) -> list[RequestMessages]:
    messages: list[Message] = [UserMessage.of_text("Please refactor the parser module.")]
    requests = []
    for i in range(calls):
        requests.append(RequestMessages(SYSTEM, tuple(messages), TOOLS))
        call = ToolCall(id=f"toolu_{i:04d}", name="Read", arguments={"path": f"src/mod_{i}.py"})
        messages.append(
            AssistantMessage(
                content=(TextContent(text=f"Reading module {i}."), call),
                api=api,
                provider="bench",
                model="bench-model",
                stop_reason="toolUse",
            )
        )
        messages.append(
            ToolResultMessage(
                tool_call_id=call.id,
                tool_name="Read",
                content=(TextContent(text=file_text(i)),),
            )
        )
    return requests


def measure(name: str, requests: list[PreparedRequest]) -> tuple[list[str], bool]:
    whole_us, delta_us, whole_bytes, delta_bytes = [], [], 0, 0
    rows: dict[str, bytes] = {}
    base: RequestBase | None = None
    for i, prepared in enumerate(requests):
        t0 = time.perf_counter()
        whole = encode_whole(prepared)
        t1 = time.perf_counter()
        stored, base = encode_request(prepared, base, f"call-{i}")
        t2 = time.perf_counter()
        whole_us.append((t1 - t0) * 1e6)
        delta_us.append((t2 - t1) * 1e6)
        whole_bytes += len(whole)
        delta_bytes += len(stored)
        rows[f"call-{i}"] = stored

    async def fetch(call_id: str) -> bytes | None:
        return rows.get(call_id)

    last = requests[-1]
    t0 = time.perf_counter()
    last_hash = hashlib.sha256(last.body).hexdigest()
    rebuilt = asyncio.run(load_request(rows[f"call-{len(requests) - 1}"], last_hash, fetch))
    rebuild_ms = (time.perf_counter() - t0) * 1000
    ok = rebuilt == last and all(
        asyncio.run(load_request(rows[f"call-{i}"], hashlib.sha256(r.body).hexdigest(), fetch)) == r
        for i, r in enumerate(requests)
    )
    big = [i for i, r in enumerate(requests) if len(r.body) >= 100_000]
    late = big or list(range(len(requests)))

    def p50(xs: list[float], idx: list[int]) -> float:
        return statistics.median(xs[i] for i in idx)

    row = (
        f"| {name} | {len(requests)} | {len(requests[-1].body) / 1024:.0f} KB "
        f"| {whole_bytes / 2**20:.2f} MiB | {delta_bytes / 2**20:.3f} MiB "
        f"| {whole_bytes / delta_bytes:.0f}x "
        f"| {p50(whole_us, late):.0f} µs | {p50(delta_us, late):.0f} µs "
        f"| {sum(whole_us) / 1000:.1f} ms | {sum(delta_us) / 1000:.1f} ms | {rebuild_ms:.2f} ms |"
    )
    return [row], ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=120)
    args = parser.parse_args()
    settings = ModelSettings(model="bench-model", max_output_tokens=4096, cache_key="bench")
    adapters = {
        "openai-chat": OpenAIChatAdapter(
            ProviderSettings(name="bench", api="openai-chat", base_url="http://127.0.0.1:9/v1")
        ),
        "anthropic": AnthropicAdapter(
            ProviderSettings(name="bench", api="anthropic", base_url="http://127.0.0.1:9")
        ),
    }
    lines = [
        "## Stored requests: whole against delta (one agent conversation per API)",
        "",
        "Per call, on the event loop's thread before the model call: the whole form (msgpack, "
        "zlib level 1 from 32 KiB) against a delta on the previous call "
        "(`stored_request.encode_request`). Medians over the calls whose prompt is 100 KB or "
        "more; the rebuild is the last call from its chain of deltas (in memory, no SQLite).",
        "",
        "| API | calls | last prompt | stored whole | stored as deltas | ratio "
        "| encode p50 whole | encode p50 delta | encode total whole | encode total delta "
        "| rebuild last |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    failed = False
    for api, adapter in adapters.items():
        print(f"stored_requests: {api}, {args.calls} calls ...", file=sys.stderr, flush=True)
        requests = [adapter.prepare(r, settings) for r in conversation(args.calls, api)]
        rows, ok = measure(api, requests)
        lines += rows
        failed |= not ok
    if failed:
        lines += ["", "**A rebuilt request differed from the bytes sent.**"]
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
