"""Per-event parse cost of each provider adapter on its largest recorded stream.

For each API: the SSE parser plus the adapter's decoder (provider JSON -> native events through
the assembler), against a bare `json.loads` of the same `data:` lines, in the same run, rounds
interleaved so machine load affects both alike. CPU time (process_time), best round of several.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.assembler import MessageAssembler
from cursor_byok.llm.gemini import GeminiAdapter
from cursor_byok.llm.http import HttpAdapter
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.openai_responses import OpenAIResponsesAdapter
from cursor_byok.llm.settings import ProviderSettings
from cursor_byok.llm.sse import SSEParser

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "providers"
ADAPTERS: list[tuple[str, type[HttpAdapter], str]] = [
    ("openai-chat", OpenAIChatAdapter, "openai-chat"),
    ("openai-responses", OpenAIResponsesAdapter, "openai-responses"),
    ("anthropic", AnthropicAdapter, "anthropic"),
    ("gemini", GeminiAdapter, "gemini"),
]
ROUNDS = 15
REPEAT = 40


def largest(folder: str) -> Path:
    return max((FIXTURES / folder).glob("*.sse"), key=lambda p: p.stat().st_size)


def run_adapter(adapter: HttpAdapter, api: str, body: bytes) -> None:
    asm = MessageAssembler(api=api, provider=api, model="m")
    asm.start()
    decoder = adapter.new_decoder(asm)
    parser = SSEParser()
    for sse in parser.feed(body) + parser.finish():
        decoder.feed(sse)
    if not asm.terminated:
        decoder.finish()


def run_json(lines: list[str]) -> None:
    for line in lines:
        json.loads(line)


def main() -> int:
    print("## Adapter parse cost per event (largest fixture of each API)\n")
    print("| API | fixture | events | adapter µs/event | json.loads µs/event | ratio |")
    print("|---|---|---|---|---|---|")
    for api, cls, folder in ADAPTERS:
        path = largest(folder)
        body = path.read_bytes()
        parser = SSEParser()
        events = parser.feed(body) + parser.finish()
        lines = [e.data for e in events if e.data.strip() != "[DONE]"]
        adapter = cls(ProviderSettings(name=api, api=api, base_url="http://127.0.0.1:9"))  # type: ignore[arg-type]

        best_a = best_j = float("inf")
        for _ in range(ROUNDS):
            t0 = time.process_time()
            for _ in range(REPEAT):
                run_adapter(adapter, api, body)
            best_a = min(best_a, time.process_time() - t0)
            t0 = time.process_time()
            for _ in range(REPEAT):
                run_json(lines)
            best_j = min(best_j, time.process_time() - t0)
        n = len(events)
        per_a = best_a / REPEAT / n * 1e6
        per_j = best_j / REPEAT / max(1, len(lines)) * 1e6
        print(
            f"| {api} | {path.name} ({len(body) // 1024} KB) | {n} | {per_a:.2f} | "
            f"{per_j:.2f} | {per_a / per_j:.2f} |"
        )
    print(
        "\nThe adapter column includes SSE framing, msgspec decoding, the provider mapping and "
        "building native events with content indices."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
