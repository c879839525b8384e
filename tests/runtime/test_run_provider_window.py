"""The provider's own window, through the production runtime with the real Chat Completions
adapter over loopback HTTP and a real SQLite file: a model configured with a 128,000-token
window served by a llama-server with a much smaller one. Its refusal (llama-server's body
shape, recorded in tests/fixtures/providers/llama-server/) gives the window; the server
compacts to fit it, warns once per model quoting the provider, and every later run of the
model in this process starts from that window. A new process (a new Runner) starts from the
configured window again: nothing was written anywhere."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cursor_byok.llm.models import Model
from cursor_byok.llm.settings import ModelSettings
from cursor_byok.loop import compaction
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime import RunnerServices, new_runner, records
from tests.runtime.harness import Client, run_request
from tests.runtime.test_run_compaction import adapter_for
from tests.runtime.test_run_small_windows import fixed_part
from tests.support.upstream import Reply, fake_upstream, fixture_bytes


def refusal(prompt: int, n_ctx: int) -> str:
    """llama-server's answer to a request over its window (the recorded body's shape)."""
    return json.dumps(
        {
            "error": {
                "code": 400,
                "message": f"request ({prompt} tokens) exceeds the available context size "
                f"({n_ctx} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": n_ctx,
            }
        }
    )


def answer(prompt: int, text: str = "ok") -> Reply:
    """A Chat Completions stream answering `text`, with the provider's count of its request."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "smollm2"}
    first = {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}
    usage = {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}
    last = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    events = [json.dumps(first), json.dumps({**last, "usage": usage}), "[DONE]"]
    return Reply.sse("".join(f"data: {e}\n\n" for e in events).encode())


def meter_windows(client: Client) -> list[int]:
    """The window (`max_tokens`) of each checkpoint's meter the client was sent."""
    return [
        m.conversation_checkpoint_update.token_details.max_tokens
        for m in client.sent
        if m.HasField("conversation_checkpoint_update")
    ]


def words(n: int, tag: str) -> str:
    return (tag + "xyz ") * n


async def test_a_refusal_with_the_window_compacts_to_fit_it_and_is_kept_per_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fixed = await fixed_part(tmp_path)
    n_ctx = fixed + 2500  # what the server really serves
    ok = fixture_bytes("openai-chat", "text-basic.sse")
    caplog.set_level(logging.WARNING, logger="cursor_byok.runtime")
    async with fake_upstream() as up:
        adapter = adapter_for("openai-chat", up.base_url)
        model = Model(
            id="local",
            display_name="local",
            provider=adapter.provider,
            settings=ModelSettings(model="smollm2", max_output_tokens=256),
            context_window=128_000,  # misjudged: the configuration's default
            prices=None,
        )
        store = await SQLiteStore.open(tmp_path / "db")
        runner = new_runner(
            RunnerServices(models={"local": model}, store=store, llm_for=lambda _m: adapter)
        )

        async def run(conversation: str, text: str, request_id: str) -> Client:
            client = Client(request_id)
            message = run_request(conversation, text)
            message.run_request.requested_model.model_id = "local"
            client.say(message)
            await runner.handle(client)
            ending = await client.ended()
            assert ending is None, ending.message[:400]
            return client

        # Real tokens: a tenth more than the character estimate (Cursor's JSON-heavy tools).
        up.push(answer(int((fixed + 1500 * 5 / 4) * 1.1)))
        first = await run("c1", "first question " + words(1500, "a"), "r1")
        assert set(meter_windows(first)) == {128_000}  # nothing reported yet
        # The second turn is over the real window: the provider refuses it and says so.
        prompt = int((fixed + (1500 + 600) * 5 / 4) * 1.1)
        up.push(Reply.json(400, refusal(prompt, n_ctx)), Reply.sse(ok), Reply.sse(ok))
        second = await run("c1", "second question " + words(600, "b"), "r2")
        assert len(up.requests) == 4  # turn 1, the refused call, the summary, the new call
        # The IDE's meter shows the window the loop now decides by, not the configured one.
        assert meter_windows(second)[-1] == n_ctx
        calls = await store.list_conversation_llm_calls("c1", limit=10)
        newest = next(c for c in calls if c.call_id == "c1:2:llm3")  # after the compaction
        assert newest.prompt_breakdown is not None
        assert records.decode_call_meter(newest.prompt_breakdown).meter.max_tokens == n_ctx

        record = await store.load("c1")
        assert record is not None
        state = records.decode_state(record.state, record.messages)
        assert [m.reason for m in state.compactions] == ["overflow"]
        window = state.context.window if state.context is not None else None
        assert window is not None and window.tokens == 128_000
        assert window.provider_tokens == n_ctx and window.size == n_ctx
        # Compacted to fit the provider's window by its own count: the refused request counted
        # as the provider did, every estimated token scaled by count / estimate.
        assert state.compactions[0].tokens_before == pytest.approx(prompt, abs=1)
        new_call = json.loads(up.requests[3].body)
        chars = len(json.dumps(new_call["messages"])) + len(json.dumps(new_call["tools"]))
        assert b"first question" not in up.requests[3].body
        real = compaction.tokens_of_chars(chars) * 1.1  # the provider's count of it
        assert real + window.min_reserve <= n_ctx, (real, n_ctx)

        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings
        (warning,) = warnings
        assert "model local" in warning and f"context window of {n_ctx} tokens" in warning
        assert "exceeds the available context size" in warning  # the provider's own text

        # A later run of the same model in this process starts from the reported window: a
        # new conversation whose first request would pass it goes out compacted or not at
        # all, never to a second refusal; and no second warning.
        up.push(Reply.sse(ok))
        third = await run("c2", "hello", "r3")
        assert set(meter_windows(third)) == {n_ctx}
        record2 = await store.load("c2")
        assert record2 is not None
        state2 = records.decode_state(record2.state, record2.messages)
        assert state2.context is not None and state2.context.window is not None
        assert state2.context.window.provider_tokens == n_ctx
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1

        # Another process knows nothing of it (nothing is written to the config or the store).
        fresh = new_runner(
            RunnerServices(models={"local": model}, store=store, llm_for=lambda _m: adapter)
        )
        assert fresh.services.provider_windows.tokens("local") == 0
        assert runner.services.provider_windows.tokens("local") == n_ctx
        await store.close()
        await adapter.aclose()
