""" "Context length exceeded" from each of the four APIs, through the production runtime with the
real adapters over loopback HTTP and a real SQLite file: one compaction (its summary call on the
same API), then a NEW call with the compacted request that succeeds; never a loop.

The error bodies are the documented ones quoted in tests/llm/test_context_errors.py (with their
sources); the successful answers are recorded provider streams (tests/fixtures/providers)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.gemini import GeminiAdapter
from cursor_byok.llm.http import HttpAdapter
from cursor_byok.llm.models import Model
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.openai_responses import OpenAIResponsesAdapter
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.types import UserMessage
from cursor_byok.loop import compaction
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime import RunnerServices, new_runner, records
from tests.llm.test_context_errors import ANTHROPIC, GEMINI, OPENAI, RESPONSES
from tests.runtime.harness import Client, cancel, run_request
from tests.support.upstream import Reply, fake_upstream, fixture_bytes

CASES = {
    "anthropic": (ANTHROPIC, "anthropic", "text-basic.sse"),
    "openai-chat": (OPENAI, "openai-chat", "text-basic.sse"),
    "openai-responses": (RESPONSES, "openai-responses", "text-basic.sse"),
    "gemini": (GEMINI, "gemini", "text-basic.sse"),
}


def adapter_for(api: str, base_url: str) -> HttpAdapter:
    provider = ProviderSettings(name=api, api=api, base_url=base_url, api_key="k")  # type: ignore[arg-type]
    match api:
        case "anthropic":
            return AnthropicAdapter(provider)
        case "openai-chat":
            return OpenAIChatAdapter(provider)
        case "openai-responses":
            return OpenAIResponsesAdapter(provider)
        case "gemini":
            return GeminiAdapter(provider)
    raise AssertionError(api)


def summary_kinds(client: Client) -> list[str]:
    return [k for k in client.kinds() if k.startswith("summary")]


@pytest.mark.parametrize("api", list(CASES))
async def test_context_length_exceeded_compacts_once_then_a_new_call(
    tmp_path: Path, api: str
) -> None:
    body, folder, fixture = CASES[api]
    ok = fixture_bytes(folder, fixture)
    async with fake_upstream() as up:
        adapter = adapter_for(api, up.base_url)
        model = Model(
            id="m",
            display_name="M",
            provider=adapter.provider,
            settings=ModelSettings(model="upstream-model", max_output_tokens=1000),
            context_window=200_000,
            prices=None,
        )
        store = await SQLiteStore.open(tmp_path / "db")
        runner = new_runner(
            RunnerServices(models={"m": model}, store=store, llm_for=lambda _m: adapter)
        )

        async def run(text: str, request_id: str) -> Client:
            client = Client(request_id)
            message = run_request("c1", text)
            message.run_request.requested_model.model_id = "m"
            client.say(message)
            await runner.handle(client)
            assert await client.ended() is None, client.kinds()
            return client

        up.push(Reply.sse(ok))
        await run("first question", "r1")
        refused = Reply.json(400, body)
        up.push(refused, Reply.sse(ok), Reply.sse(ok))  # refused, the summary, the new call
        second = await run("second question", "r2")
        assert summary_kinds(second) == ["summary_started", "summary", "summary_completed"]
        assert "turn_ended" in second.kinds()
        assert len(up.requests) == 4
        _, refused_request, summary_request, new_request = up.requests
        assert json.dumps(compaction.SUMMARY_PROMPT)[1:-1].encode() in summary_request.body
        assert new_request.body != refused_request.body
        assert b"first question" not in new_request.body  # summarized
        assert b"second question" in new_request.body  # the kept tail
        assert json.dumps(compaction.SUMMARY_HEADER)[1:30].encode() in new_request.body

        record = await store.load("c1")
        assert record is not None
        state = records.decode_state(record.state, record.messages)
        assert len(state.compactions) == 1 and state.compactions[0].reason == "overflow"
        assert state.messages[0] == state.log[state.compactions[0].at]
        assert isinstance(state.messages[1], UserMessage)
        assert state.messages[1].text == "second question"
        calls = await store.list_conversation_llm_calls("c1", 10)
        assert sorted(c.status for c in calls) == ["committed"] * 3 + ["failed"]
        await store.close()
        await adapter.aclose()


async def test_the_summary_is_written_by_the_configured_compaction_model(tmp_path: Path) -> None:
    ok = fixture_bytes("openai-chat", "text-basic.sse")
    async with fake_upstream() as up:
        adapter = adapter_for("openai-chat", up.base_url)

        def model(model_id: str, upstream: str, compaction_model: str | None = None) -> Model:
            return Model(
                id=model_id,
                display_name=model_id,
                provider=adapter.provider,
                settings=ModelSettings(model=upstream, max_output_tokens=1000),
                context_window=200_000,
                prices=None,
                compaction_model=compaction_model,
            )

        models = {"m": model("m", "big-model", "cheap"), "cheap": model("cheap", "cheap-model")}
        store = await SQLiteStore.open(tmp_path / "db")
        runner = new_runner(RunnerServices(models=models, store=store, llm_for=lambda _m: adapter))
        for n, message in enumerate([run_request("c1", "first"), run_request("c1", "second")]):
            message.run_request.requested_model.model_id = "m"
            client = Client(f"r{n}")
            client.say(message)
            up.push(Reply.sse(ok))
            await runner.handle(client)
            assert await client.ended() is None
        up.push(Reply.sse(ok))
        summarize = run_request("c1")
        summarize.run_request.requested_model.model_id = "m"
        summarize.run_request.action.summarize_action.SetInParent()
        client = Client("r-sum")
        client.say(summarize)
        await runner.handle(client)
        assert await client.ended() is None
        assert summary_kinds(client) == ["summary_started", "summary", "summary_completed"]
        models_asked = [json.loads(r.body)["model"] for r in up.requests]
        assert models_asked == ["big-model", "big-model", "cheap-model"]
        (summary_call,) = [
            c for c in await store.list_conversation_llm_calls("c1", 10) if ":summary" in c.call_id
        ]
        assert summary_call.model == "cheap-model" and summary_call.status == "committed"
        await store.close()
        await adapter.aclose()


async def test_a_cancel_during_the_summary_call_records_it_canceled(tmp_path: Path) -> None:
    ok = fixture_bytes("openai-chat", "text-basic.sse")
    async with fake_upstream() as up:
        adapter = adapter_for("openai-chat", up.base_url)
        model = Model(
            id="m",
            display_name="M",
            provider=adapter.provider,
            settings=ModelSettings(model="upstream-model", max_output_tokens=1000),
            context_window=200_000,
            prices=None,
        )
        store = await SQLiteStore.open(tmp_path / "db")
        runner = new_runner(
            RunnerServices(models={"m": model}, store=store, llm_for=lambda _m: adapter)
        )
        for n, text in enumerate(["first", "second"]):
            message = run_request("c1", text)
            message.run_request.requested_model.model_id = "m"
            client = Client(f"r{n}")
            client.say(message)
            up.push(Reply.sse(ok))
            await runner.handle(client)
            assert await client.ended() is None
        hang = Reply(chunks=[], hang_after=True)
        up.push(hang)
        summarize = run_request("c1")
        summarize.run_request.requested_model.model_id = "m"
        summarize.run_request.action.summarize_action.SetInParent()
        client = Client("r-sum")
        client.say(summarize)
        task = asyncio.create_task(runner.handle(client))
        for _ in range(500):  # the summary call reached the provider
            if len(up.requests) == 3:
                break
            await asyncio.sleep(0.01)
        assert len(up.requests) == 3
        client.say(cancel())
        await asyncio.wait_for(task, 10)
        ending = await client.ended()
        assert ending is not None and ending.code == "canceled"
        assert summary_kinds(client) == ["summary_started"]
        (summary_call,) = [
            c for c in await store.list_conversation_llm_calls("c1", 10) if ":summary" in c.call_id
        ]
        assert summary_call.status == "canceled"
        record = await store.load("c1")
        assert record is not None
        state = records.decode_state(record.state, record.messages)
        assert state.compactions == () and len(state.log) == 4  # nothing appended
        await store.close()
        await adapter.aclose()
