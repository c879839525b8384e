"""Model aliases and server.default_model against the REAL server process: a run asked for by
alias is served by that model and logged under its id; the catalogue lists the aliases; with a
default model, names not served (the IDE's `default` among them) go to it."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from tests.e2e.test_shim import ShimRun, http, run_request, unique
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream

CONFIG = """
[server]
host = "127.0.0.1"
database = "{db}"
{server}

[providers.brain]
api = "openai-chat"
base_url = "{upstream}/v1"

[models.sonnet]
provider = "brain"
model = "upstream-sonnet"
name = "Sonnet"
aliases = ["claude-4-sonnet", "claude-sonnet-4"]

[models.qwen]
provider = "brain"
model = "upstream-qwen"
aliases = ["local"]
"""


def start(upstream: FakeUpstream, work: Path, server: str = "") -> Iterator[ServerProcess]:
    text = CONFIG.format(db=work / "byok.db", upstream=upstream.base_url, server=server)
    with server_process(text, work) as srv:
        yield srv


@pytest.fixture(scope="module")
def aliased(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from start(upstream, tmp_path_factory.mktemp("aliased"))


@pytest.fixture(scope="module")
def defaulted(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from start(upstream, tmp_path_factory.mktemp("defaulted"), 'default_model = "local"')


@dataclass
class Turn:
    request_id: str
    prompt: str
    text: str
    end: dict[str, Any]


async def one_turn(server: ServerProcess, model: str) -> Turn:
    prompt = unique(f"asked for {model}")
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, model=model))
            end = await reader.wait_end()
    return Turn(run.request_id, prompt, "".join(reader.texts), end)


def upstream_model(upstream: FakeUpstream, marker: str) -> str:
    """The `model` the upstream was asked for in the request carrying `marker`."""
    bodies = [json.loads(r.body) for r in list(upstream.requests) if marker.encode() in r.body]
    assert len(bodies) == 1, len(bodies)
    return str(bodies[0]["model"])


def run_line(server: ServerProcess, request_id: str) -> str:
    """The run's one log line; it is written as the run ends, which may be just after the
    client saw the end of its stream (wait for it, bounded)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [ln for ln in server.log().splitlines() if f"request_id={request_id}" in ln]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(lines) == 1, server.log()
    return lines[0]


async def test_a_run_asked_for_by_alias_is_served_by_that_model(
    aliased: ServerProcess, upstream: FakeUpstream
) -> None:
    turn = await one_turn(aliased, "claude-4-sonnet")
    assert turn.end == {}, turn.end
    assert turn.text == f"You said: {turn.prompt}"
    assert upstream_model(upstream, turn.prompt) == "upstream-sonnet"
    line = run_line(aliased, turn.request_id)
    assert re.search(r"\bmodel=sonnet\b", line) and "outcome=ok" in line, line
    turn = await one_turn(aliased, "LOCAL")  # ignoring case
    assert turn.end == {} and upstream_model(upstream, turn.prompt) == "upstream-qwen"


async def test_an_unknown_name_lists_the_served_models_with_their_aliases(
    aliased: ServerProcess,
) -> None:
    for asked in ("gpt-4", "default"):  # without default_model, the IDE's Auto is unknown too
        error = (await one_turn(aliased, asked)).end["error"]
        assert error["code"] == "invalid_argument"
        assert error["message"] == (
            f"unknown model '{asked}'; this server offers: qwen (aliases: local), "
            "sonnet (aliases: claude-4-sonnet, claude-sonnet-4)"
        )
        details = cc.decode_error_details(error)
        assert details.error == aiserver_pb2.ErrorDetails.ERROR_BAD_MODEL_NAME


async def test_the_default_model_takes_names_not_served(
    defaulted: ServerProcess, upstream: FakeUpstream
) -> None:
    for asked, served, upstream_name in (
        ("default", "qwen", "upstream-qwen"),  # the IDE's Auto entry
        ("gpt-4", "qwen", "upstream-qwen"),  # a name a client remembers
        ("claude-sonnet-4", "sonnet", "upstream-sonnet"),  # a served alias still wins
    ):
        turn = await one_turn(defaulted, asked)
        assert turn.end == {}, (asked, turn.end)
        assert upstream_model(upstream, turn.prompt) == upstream_name
        assert re.search(rf"\bmodel={served}\b", run_line(defaulted, turn.request_id))
    assert "model 'gpt-4' is not served; using the default qwen" in defaulted.log()


@pytest.mark.parametrize("codec", ["proto", "json"])
async def test_the_catalogue_lists_aliases_and_the_default(
    aliased: ServerProcess, defaulted: ServerProcess, codec: str
) -> None:
    async with http(aliased) as client:
        usable = await cc.unary(
            client,
            "/agent.v1.AgentService/GetUsableModels",
            agent_pb2.GetUsableModelsRequest(),
            agent_pb2.GetUsableModelsResponse,
            codec=codec,
        )
        assert {m.model_id: list(m.aliases) for m in usable.models} == {
            "sonnet": ["claude-4-sonnet", "claude-sonnet-4"],
            "qwen": ["local"],
        }
        available = await cc.unary(
            client,
            "/aiserver.v1.AiService/AvailableModels",
            aiserver_pb2.AvailableModelsRequest(),
            aiserver_pb2.AvailableModelsResponse,
            codec=codec,
        )
        assert {m.name: list(m.id_aliases) for m in available.models} == {
            "sonnet": ["claude-4-sonnet", "claude-sonnet-4"],
            "qwen": ["local"],
        }
        assert available.composer_model_config.default_model == "sonnet"  # the first
    async with http(defaulted) as client:
        available = await cc.unary(
            client,
            "/aiserver.v1.AiService/AvailableModels",
            aiserver_pb2.AvailableModelsRequest(),
            aiserver_pb2.AvailableModelsResponse,
            codec=codec,
        )
        assert list(available.model_names) == ["sonnet", "qwen"]  # the configuration's order
        config = available.composer_model_config
        assert config.default_model == "qwen" and list(config.fallback_models) == ["sonnet"]
        cli = await cc.unary(
            client,
            "/agent.v1.AgentService/GetDefaultModelForCli",
            agent_pb2.GetDefaultModelForCliRequest(),
            agent_pb2.GetDefaultModelForCliResponse,
            codec=codec,
        )
        assert cli.model.model_id == "qwen" and list(cli.model.aliases) == ["local"]
