"""`cursor-byok init` (and so scripts/serve's first run) asks the local server for the window it
serves and writes it into the starter, over real loopback HTTP: llama-server's `/props` (the
recorded body, n_ctx 1024, alias smollm2) and Ollama's `/api/tags` + `/api/ps`. With nothing
answering, the starter is written as it always was."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from cursor_byok import cli
from cursor_byok.config import parse_config
from cursor_byok.starter_config import OLLAMA_DEFAULT_WINDOW, starter_config
from tests.app.test_doctor_windows import OLLAMA_PS, OLLAMA_SHOW, llama
from tests.support.upstream import FakeUpstream, Received, Reply


async def _started(handler: Callable[[Received], Reply]) -> FakeUpstream:
    return await FakeUpstream(default=handler).start()


def _write(tmp_path: Path, urls: list[str]) -> tuple[str, int]:
    target = tmp_path / "cursor-byok.toml"
    status = cli.cmd_init(str(target), False, urls)
    return target.read_text(), status


async def test_init_writes_the_window_a_llama_server_serves(tmp_path: Path) -> None:
    server = await _started(llama)
    try:
        url = f"{server.base_url}/v1"
        text, status = await _in_thread(_write, tmp_path, [url])
    finally:
        await server.stop()
    assert status == 0
    config = parse_config(text, env={})
    local = config.models["local"]
    assert local.context_window == 1024
    assert local.settings.model == "smollm2"
    assert local.provider.base_url == url
    assert "init read it: llama.cpp at" in text and "default_generation_settings.n_ctx" in text
    # Only those lines differ from the starter.
    changed = set(text.splitlines()) - set(starter_config().splitlines())
    assert len(changed) == 4, changed  # base_url, model, context_window and its note


async def test_init_writes_the_context_an_ollama_model_is_loaded_with(tmp_path: Path) -> None:
    def ollama(received: Received) -> Reply:
        if received.path == "/api/tags":
            return Reply.json(200, json.dumps({"models": [{"name": "qwen2.5-coder:7b"}]}))
        if received.path == "/api/ps":
            return Reply.json(200, json.dumps(OLLAMA_PS))
        if received.path == "/api/show":
            return Reply.json(200, json.dumps(OLLAMA_SHOW))
        return Reply.json(404, "404 page not found")

    nothing = await _started(lambda _r: Reply.json(404, "{}"))
    server = await _started(ollama)
    try:
        urls = [f"{nothing.base_url}/v1", f"{server.base_url}/v1"]  # the first answers nothing
        text, _ = await _in_thread(_write, tmp_path, urls)
    finally:
        await server.stop()
        await nothing.stop()
    local = parse_config(text, env={}).models["local"]
    assert (local.context_window, local.settings.model) == (8192, "qwen2.5-coder:7b")
    assert local.provider.base_url == f"{server.base_url}/v1"


async def test_init_with_only_the_models_maximum_writes_ollamas_default(tmp_path: Path) -> None:
    def ollama(received: Received) -> Reply:
        if received.path == "/api/tags":
            return Reply.json(200, json.dumps({"models": [{"name": "qwen2.5-coder:7b"}]}))
        if received.path == "/api/ps":
            return Reply.json(200, '{"models":[]}')
        if received.path == "/api/show":
            return Reply.json(200, json.dumps(OLLAMA_SHOW))
        return Reply.json(404, "404 page not found")

    server = await _started(ollama)
    try:
        text, _ = await _in_thread(_write, tmp_path, [f"{server.base_url}/v1"])
    finally:
        await server.stop()
    assert parse_config(text, env={}).models["local"].context_window == OLLAMA_DEFAULT_WINDOW
    assert "qwen2.context_length" in text


def test_init_with_nothing_answering_writes_the_plain_starter(tmp_path: Path) -> None:
    text, status = _write(tmp_path, ["http://127.0.0.1:9/v1"])  # the discard port
    assert status == 0 and text == starter_config()


async def _in_thread(fn: Callable[..., tuple[str, int]], *args: object) -> tuple[str, int]:
    """cmd_init runs its own event loop (asyncio.run), as the command does: off this one."""
    return await asyncio.to_thread(fn, *args)
