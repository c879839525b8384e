"""Misjudged windows against a real llama-server (8,192-token context, SmolLM2): `doctor` and
`init` read the window it really serves (GET /props), and a model configured with 128,000
tokens, driven through the production runtime with Cursor's tool set, is refused once by the
provider, compacts to the 8,192 tokens the refusal names, warns once, and every turn ends with
no second refusal."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from cursor_byok import cli
from cursor_byok.config import parse_config
from cursor_byok.doctor_windows import local_window_rows
from cursor_byok.llm.models import Model
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime import RunnerServices, new_runner, records
from tests.realupstream.conftest import LlamaServer
from tests.runtime.harness import Client, run_request

TURNS = 8
NOTE = "The sea is wide and deep, and its tides follow the moon. " * 60  # ~900 real tokens


async def test_doctor_reads_the_window_the_real_server_serves(llama_server_8k: LlamaServer) -> None:
    text = f"""
[providers.llama]
api = "openai-chat"
base_url = "{llama_server_8k.v1_url}"

[models.local]
provider = "llama"
model = "{llama_server_8k.model}"
context_window = 32768
"""
    ((name, status, detail, step),) = await local_window_rows(parse_config(text, env={}))
    assert (name, status) == ("window local", "WARN")
    assert "llama.cpp serves 8,192 tokens" in detail
    assert step == "set context_window = 8192 for [models.local]"


def test_init_writes_the_real_servers_window(llama_server_8k: LlamaServer, tmp_path: Path) -> None:
    target = tmp_path / "cursor-byok.toml"
    assert cli.cmd_init(str(target), False, [llama_server_8k.v1_url]) == 0
    local = parse_config(target.read_text(), env={}).models["local"]
    assert (local.context_window, local.settings.model) == (8192, llama_server_8k.model)


async def test_a_misjudged_window_is_refused_once_then_compacted_to_the_real_one(
    llama_server_8k: LlamaServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cursor_byok.runtime")
    provider = ProviderSettings(name="llama", api="openai-chat", base_url=llama_server_8k.v1_url)
    adapter = OpenAIChatAdapter(provider)
    model = Model(
        id="local",
        display_name="local",
        provider=provider,
        settings=ModelSettings(model=llama_server_8k.model, max_output_tokens=32, temperature=0),
        context_window=128_000,  # the configuration's guess; the server serves 8,192
        prices=None,
    )
    store = await SQLiteStore.open(tmp_path / "db")
    runner = new_runner(
        RunnerServices(models={"local": model}, store=store, llm_for=lambda _m: adapter)
    )
    ends: list[str] = []
    try:
        for n in range(1, TURNS + 1):
            client = Client(f"r{n}")
            message = run_request("c1", f"Note {n}: {NOTE}\nSay one short fact about the sea.")
            message.run_request.requested_model.model_id = "local"
            client.say(message)
            await asyncio.wait_for(runner.handle(client), 600)
            ending = await client.ended()
            ends.append("" if ending is None else f"{ending.code}: {ending.message[:300]}")
        calls = await store.list_conversation_llm_calls("c1", 200)
        record = await store.load("c1")
    finally:
        await store.close()
        await adapter.aclose()
    assert ends == [""] * TURNS, ends
    failed = [c for c in calls if c.status == "failed"]
    assert len(failed) == 1, [(c.call_id, c.status) for c in calls]  # refused once, never again
    assert record is not None
    state = records.decode_state(record.state, record.messages)
    assert state.context is not None and state.context.window is not None
    assert state.context.window.provider_tokens == 8192
    reasons = [m.reason for m in state.compactions]
    assert reasons[0] == "overflow" and len(reasons) >= 2, reasons
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "available context size (8192 tokens)" in warnings[0]
    sizes = sorted((c.call_id, c.input_tokens, c.status) for c in calls)
    # llama-server counts only the tokens it read. The retried call after the refusal starts
    # with the agent prefix the first call read; with the fixture's one slot it comes from the
    # prompt cache (with 4 slots it was read again, here and after the second compaction: 5,331
    # tokens each, 73 s more for this test).
    first = next(c for c in calls if c.call_id == "c1:1:llm1")
    refused_turn = failed[0].call_id.rsplit(":", 1)[0] + ":"
    retried = next(
        c
        for c in calls
        if c.call_id.startswith(refused_turn)
        and c.status == "committed"
        and "summary" not in c.call_id
    )
    assert retried.input_tokens < first.input_tokens // 2, sizes
    print(f"\nmisjudged window: compactions {reasons}; prompt tokens per call: {sizes}")
