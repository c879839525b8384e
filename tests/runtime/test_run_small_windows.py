"""Small windows through the production runtime (the real loop, the real SQLite store, the
Cursor tool set as the client's request gets it): a model whose window is its fixed part plus
about 2.8k tokens, and an 8,280-token model whose summaries a 128k compaction model writes.
Every turn of a long chat ends, and no request the provider gets is over its window.

The scripted provider counts a request as a real tokenizer would for Cursor's JSON-heavy tool
set: a tenth more than the server's character estimate (so the provider's usage, which drives
the next estimate, is higher than the characters suggest, as in the issue's repro)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cursor_byok.llm.faux import FauxLLM, FauxResponse
from cursor_byok.llm.models import Model
from cursor_byok.llm.settings import ModelSettings
from cursor_byok.llm.types import RequestMessages, Usage
from cursor_byok.loop import compaction
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime import RunnerServices, new_runner
from tests.runtime.harness import MODEL, Client, run_request

REAL_PER_ESTIMATED = 1.1  # real tokens per estimated token (tools' JSON schemas count denser)


def estimated(request: RequestMessages) -> int:
    fixed = compaction.fixed_tokens(request.system_prompt, request.tools)
    return compaction.estimated_tokens(request.messages, len(request.messages), fixed)


def words(n: int, tag: str) -> str:
    return (tag + "xyz ") * n  # about n tokens by the character estimate


@dataclass
class Provider:
    """A provider with a real window: it counts each request, refuses one over its window
    (as llama-server does) and answers with its usage."""

    windows: dict[str, int]  # by upstream model name
    prompts: list[tuple[str, int, int, bool]] = field(default_factory=list)  # + is a summary

    def answer(self, request: RequestMessages, model: str) -> FauxResponse:
        prompt = math.ceil(estimated(request) * REAL_PER_ESTIMATED)
        summary = request.system_prompt == compaction.SUMMARY_PROMPT
        text = words(150, "sum") if summary else words(120, "ans")
        output = math.ceil(len(text) / compaction.CHARS_PER_TOKEN * REAL_PER_ESTIMATED)
        self.prompts.append((model, prompt, output, summary))
        if prompt + output > self.windows[model]:
            return FauxResponse.error(
                f"request ({prompt} tokens) exceeds the available context size "
                f"({self.windows[model]} tokens)",
                started=False,
                http_status=400,
            )
        return FauxResponse.text(text, usage=Usage(input=prompt, output=output))


class ScriptedLLM(FauxLLM):
    """FauxLLM whose every answer comes from `Provider` (for the model the call names)."""

    def __init__(self, provider: Provider) -> None:
        super().__init__()
        self.provider_model = provider

    def send(self, prepared):  # type: ignore[no-untyped-def]
        model = prepared.model
        self.add(lambda request: self.provider_model.answer(request, model))
        return super().send(prepared)


def model(model_id: str, window: int, compaction_model: str | None = None) -> Model:
    return Model(
        id=model_id,
        display_name=model_id,
        provider=MODEL.provider,
        settings=ModelSettings(model=model_id),
        context_window=window,
        prices=None,
        compaction_model=compaction_model,
    )


async def fixed_part(tmp_path: Path) -> int:
    """The character estimate of the system prompt and the tools of the harness's requests."""
    provider = Provider(windows={"probe": 1_000_000})
    llm = ScriptedLLM(provider)
    store = await SQLiteStore.open(tmp_path / "probe.db")
    runner = new_runner(
        RunnerServices(
            models={"probe": model("probe", 1_000_000)}, store=store, llm_for=lambda _m: llm
        )
    )
    client = Client("probe")
    message = run_request("probe", "hi")
    message.run_request.requested_model.model_id = "probe"
    client.say(message)
    await runner.handle(client)
    assert await client.ended() is None
    await store.close()
    request = llm.requests[0]
    return compaction.fixed_tokens(request.system_prompt, request.tools)


async def chat(
    tmp_path: Path, models: dict[str, Model], provider: Provider, turns: int
) -> tuple[list[str], ScriptedLLM]:
    """`turns` turns of one conversation on the first model, a run each; what each ended
    with ("" for a turn that ended normally)."""
    llm = ScriptedLLM(provider)
    store = await SQLiteStore.open(tmp_path / "chat.db")
    runner = new_runner(RunnerServices(models=models, store=store, llm_for=lambda _m: llm))
    main = next(iter(models))
    ends: list[str] = []
    for n in range(1, turns + 1):
        client = Client(f"r{n}")
        message = run_request("c1", f"question {n}: " + words(60, f"q{n}"))
        message.run_request.requested_model.model_id = main
        client.say(message)
        await runner.handle(client)
        ending = await client.ended()
        ends.append("" if ending is None else f"{ending.code}: {ending.message}")
    await store.close()
    return ends, llm


async def test_a_window_of_the_fixed_part_plus_2_8k_serves_every_turn(tmp_path: Path) -> None:
    fixed = await fixed_part(tmp_path)
    window = fixed + 2800
    provider = Provider(windows={"small": window})
    ends, _ = await chat(tmp_path, {"small": model("small", window)}, provider, 12)
    assert ends == [""] * 12, [(n + 1, e) for n, e in enumerate(ends) if e][:1]
    for name, prompt, output, _ in provider.prompts:
        assert prompt + output <= window, (name, prompt, output, window)
    summaries = [p for p in provider.prompts if p[3]]
    assert summaries, "the small window compacted"
    most = max(p + o for _, p, o, s in provider.prompts if not s)
    print(
        f"\nwindow {window} (fixed {fixed}): {len(summaries)} compactions in 12 turns, "
        f"largest request + answer {most}"
    )


@pytest.mark.parametrize("turns", [20])
async def test_an_8280_window_with_a_128k_compaction_model_ends_every_turn(
    tmp_path: Path, turns: int
) -> None:
    provider = Provider(windows={"small": 8_280, "big": 128_000})
    models = {"small": model("small", 8_280, compaction_model="big"), "big": model("big", 128_000)}
    ends, llm = await chat(tmp_path, models, provider, turns)
    assert ends == [""] * turns, [(n + 1, e) for n, e in enumerate(ends) if e][:1]
    main = [p for p in provider.prompts if p[0] == "small"]
    summary_calls = [c for c in llm.calls if c.settings.model == "big"]
    assert summary_calls, "the compaction model wrote summaries"
    for name, prompt, output, _ in main:
        assert prompt + output <= 8_280, (name, prompt, output)
    most = max(p + o for _, p, o, _ in main)
    bounds = sorted({c.settings.max_output_tokens for c in summary_calls})
    print(
        f"\n8,280 + 128k: {len(summary_calls)} summaries in {turns} turns, largest request + "
        f"answer {most}, summary bounds {bounds}"
    )
    # The summary's answer bound is what the main window holds, not the big model's 4,096.
    for call in summary_calls:
        bound = call.settings.max_output_tokens
        assert bound is not None and 0 < bound < 4096
