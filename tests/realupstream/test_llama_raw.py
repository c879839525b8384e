"""Smoke tests of the raw llama-server HTTP API (plain httpx, not our adapters).

They pin down what the real local upstream actually sends, so adapter tests built on the
``llama_server`` fixture can rely on it. See docs/real-upstream.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .conftest import (
    TOOL_CALL_EXPECTED_ARGS,
    TOOL_CALL_EXPECTED_NAME,
    TOOL_CALL_PRIMER_STRUCTURED,
    TOOL_CALL_SAMPLING,
    LlamaServer,
    tool_call_history,
    tool_call_history_anthropic,
    tool_call_history_responses,
)

pytestmark = pytest.mark.realupstream

TIMEOUT = httpx.Timeout(60.0, connect=5.0)


def _sse(resp: httpx.Response) -> Iterator[tuple[str | None, str]]:
    """Yield (event, data) per SSE message; event is None when the server sent no `event:`."""
    event: str | None = None
    data: list[str] = []
    for line in resp.iter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[len("event:") :].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:") :].lstrip())
    if data:
        yield event, "\n".join(data)


def _stream(server: LlamaServer, path: str, body: dict[str, Any]) -> list[tuple[str | None, str]]:
    with (
        httpx.Client(timeout=TIMEOUT) as client,
        client.stream("POST", server.base_url + path, json=body) as resp,
    ):
        if resp.status_code != 200:
            resp.read()
            pytest.fail(f"POST {path} -> {resp.status_code}: {resp.text[:500]}")
        assert resp.headers["content-type"].startswith("text/event-stream")
        return list(_sse(resp))


def test_health_and_models(llama_server: LlamaServer) -> None:
    r = httpx.get(llama_server.base_url + "/health", timeout=TIMEOUT)
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}
    models = httpx.get(llama_server.v1_url + "/models", timeout=TIMEOUT).json()
    assert llama_server.model in [m["id"] for m in models["data"]]


def test_chat_completions_stream_text_and_usage(llama_server: LlamaServer) -> None:
    body = {
        "model": llama_server.model,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Say hello in one short sentence."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 32,
        "temperature": 0,
        "seed": 1,
    }
    msgs = _stream(llama_server, "/v1/chat/completions", body)
    assert msgs[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in msgs[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert all(c["model"] == llama_server.model for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip()
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] in ("stop", "length")
    usage_chunks = [c for c in chunks if c.get("usage")]
    assert usage_chunks, "include_usage must yield a usage chunk"
    usage = usage_chunks[-1]["usage"]
    assert usage_chunks[-1]["choices"] == []
    assert usage["prompt_tokens"] > 0
    assert 0 < usage["completion_tokens"] <= 32
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_anthropic_messages_stream(llama_server: LlamaServer) -> None:
    body = {
        "model": llama_server.model,
        "max_tokens": 32,
        "system": "You are a helpful assistant.",
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "stream": True,
        "temperature": 0,
    }
    msgs = _stream(llama_server, "/v1/messages", body)
    events = [json.loads(d) for _, d in msgs]
    types = [e["type"] for e in events]
    # `event:` lines match the payload's `type`
    assert [ev for ev, _ in msgs] == types
    assert types[0] == "message_start"
    assert types[-1] == "message_stop"
    assert "content_block_start" in types and "content_block_stop" in types
    assert "message_delta" in types
    assert events[0]["message"]["role"] == "assistant"
    text = "".join(
        e["delta"]["text"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    )
    assert text.strip()
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert delta["usage"]["output_tokens"] > 0


def test_openai_responses_stream(llama_server: LlamaServer) -> None:
    body = {
        "model": llama_server.model,
        "instructions": "You are a helpful assistant.",
        "input": [{"role": "user", "content": "Say hello in one short sentence."}],
        "stream": True,
        "max_output_tokens": 32,
        "temperature": 0,
    }
    msgs = _stream(llama_server, "/v1/responses", body)
    events = [json.loads(d) for _, d in msgs]
    types = [e["type"] for e in events]
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    for t in (
        "response.output_item.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
    ):
        assert t in types, t
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text.strip()
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["text"] == text
    completed = events[-1]["response"]
    assert completed["status"] == "completed"
    assert completed["usage"]["output_tokens"] > 0


def _tool_call_once(server: LlamaServer) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    hist = tool_call_history()
    body = {
        "model": server.model,
        **hist,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 64,
        **TOOL_CALL_SAMPLING,
    }
    msgs = _stream(server, "/v1/chat/completions", body)
    assert msgs[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in msgs[:-1]]
    deltas = [
        tc
        for c in chunks
        if c["choices"]
        for tc in c["choices"][0]["delta"].get("tool_calls") or []
    ]
    return chunks, deltas


def test_tool_call_recipe_is_deterministic(llama_server: LlamaServer) -> None:
    calls = []
    for _ in range(3):
        chunks, deltas = _tool_call_once(llama_server)
        assert deltas, "no tool_calls deltas: " + json.dumps(chunks)[:800]
        first = deltas[0]
        # Real OpenAI streaming shape: first delta carries index/id/type/name ...
        assert first["index"] == 0
        assert first["type"] == "function"
        assert first["id"]
        assert first["function"]["name"] == TOOL_CALL_EXPECTED_NAME
        # ... later deltas only index + argument fragments.
        for d in deltas[1:]:
            assert d["index"] == 0
            assert "name" not in d.get("function", {})
        args = "".join(d.get("function", {}).get("arguments") or "" for d in deltas)
        assert json.loads(args) == TOOL_CALL_EXPECTED_ARGS
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        assert finish[-1] == "tool_calls"
        calls.append((first["function"]["name"], args))
    assert calls[0] == calls[1] == calls[2]


def test_tool_call_recipe_anthropic_messages(llama_server: LlamaServer) -> None:
    body = {
        "model": llama_server.model,
        "max_tokens": 64,
        "stream": True,
        **tool_call_history_anthropic(),
        **TOOL_CALL_SAMPLING,
    }
    events = [json.loads(d) for _, d in _stream(llama_server, "/v1/messages", body)]
    starts = [e for e in events if e["type"] == "content_block_start"]
    tool_blocks = [e for e in starts if e["content_block"]["type"] == "tool_use"]
    assert tool_blocks, json.dumps(events)[:800]
    block = tool_blocks[0]
    assert block["content_block"]["name"] == TOOL_CALL_EXPECTED_NAME
    assert block["content_block"]["id"]
    partial = "".join(
        e["delta"]["partial_json"]
        for e in events
        if e["type"] == "content_block_delta"
        and e["index"] == block["index"]
        and e["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(partial) == TOOL_CALL_EXPECTED_ARGS
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "tool_use"


def test_tool_call_recipe_openai_responses(llama_server: LlamaServer) -> None:
    body = {
        "model": llama_server.model,
        "max_output_tokens": 64,
        "stream": True,
        **tool_call_history_responses(),
        **TOOL_CALL_SAMPLING,
    }
    events = [json.loads(d) for _, d in _stream(llama_server, "/v1/responses", body)]
    added = [
        e
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    ]
    assert added, json.dumps(events)[:800]
    item = added[0]["item"]
    assert item["name"] == TOOL_CALL_EXPECTED_NAME
    assert item["call_id"]
    args = "".join(
        e["delta"]
        for e in events
        if e["type"] == "response.function_call_arguments.delta" and e["item_id"] == item["id"]
    )
    assert json.loads(args) == TOOL_CALL_EXPECTED_ARGS
    done = next(
        e
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["id"] == item["id"]
    )
    assert json.loads(done["item"]["arguments"]) == TOOL_CALL_EXPECTED_ARGS
    completed = events[-1]
    assert completed["type"] == "response.completed"
    assert [o["type"] for o in completed["response"]["output"]] == ["function_call"]


def test_tool_call_recipe_structured_primer_variant(llama_server: LlamaServer) -> None:
    """The unanswered structured OpenAI tool call works as a primer too (chat endpoint)."""
    hist = tool_call_history()
    hist["messages"][2] = TOOL_CALL_PRIMER_STRUCTURED
    body = {"model": llama_server.model, **hist, "max_tokens": 64, **TOOL_CALL_SAMPLING}
    r = httpx.post(llama_server.v1_url + "/chat/completions", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == TOOL_CALL_EXPECTED_NAME
    assert json.loads(call["function"]["arguments"]) == TOOL_CALL_EXPECTED_ARGS
