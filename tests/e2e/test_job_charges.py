"""GenerateImage priced and charged to the person token of the run, through the real server
process over the shim: `[image_generation] price_per_image` is reserved of the token's budget
before the image is made and settles to what it cost; the image that would pass the budget is
not made (the images endpoint never hears of it) and the model reads why."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cursor_byok.store import open_store
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.runtime.reservations import month_window
from tests.e2e.test_queries import query_of, respond, tool_prompt
from tests.e2e.test_shim import ShimRun, chat_requests, exec_of, exec_reply, http, run_request
from tests.e2e.test_tokens import add_token
from tests.e2e.test_web_tools import images_answer
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, ThreadedUpstream, server_process
from tests.support.upstream import FakeUpstream

OPERATOR = "PLANTED-operator-token-images"
PRICE_PER_IMAGE = 0.04
BUDGET = 0.10


@pytest.fixture(scope="module")
def images() -> Iterator[FakeUpstream]:
    with ThreadedUpstream(images_answer) as up:
        yield up


def config_text(upstream: FakeUpstream, images: FakeUpstream, db: Path) -> str:
    # Model calls cost next to nothing ($1 per million output tokens, at most 100 of them).
    return f"""
[server]
database = "{db}"
auth_token = "{OPERATOR}"

[providers.brain]
api = "openai-chat"
base_url = "{upstream.base_url}/v1"

[providers.images]
api = "openai-chat"
base_url = "{images.base_url}/v1"
api_key = "sk-image-test-key-0123456789"

[models."brain-1"]
provider = "brain"
model = "brain-1"
max_output_tokens = 100

[models."brain-1".prices]
output = 1.0

[image_generation]
provider = "images"
model = "img-test-1"
price_per_image = {PRICE_PER_IMAGE}
"""


@pytest.fixture(scope="module")
def priced(
    upstream: FakeUpstream, images: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, Path, str]]:
    work = tmp_path_factory.mktemp("images")
    db = work / "byok.db"
    text = config_text(upstream, images, db)
    config = work / "cursor-byok.toml"
    config.write_text(text)
    secret = add_token(config, "ivy", "--budget-usd", str(BUDGET))
    with server_process(text, work) as server:
        yield server, db, secret


async def image_turn(
    server: ServerProcess, token: str, description: str, *, made: bool = True
) -> tuple[str, Any]:
    """One approved GenerateImage turn: the prompt and the end of its stream."""
    args = {"description": description, "filename": "fox.png", "aspect_ratio": "1:1"}
    prompt = tool_prompt("GenerateImage", args)
    async with http(server) as client:
        run = ShimRun(client, token=token)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            asked = await reader.wait_for(query_of("generate_image_request_query"))
            response = a.GenerateImageRequestResponse(
                approved=a.GenerateImageRequestResponse.Approved(description=description)
            )
            await run.send(
                respond(asked.interaction_query.id, generate_image_request_response=response)
            )
            if made:  # the image's file, written by the client
                got = await reader.wait_for(exec_of("write_args"), timeout=30)
                write = got.exec_server_message.write_args
                ok = a.WriteSuccess(path=write.path, file_size=len(write.file_bytes))
                await run.send(
                    exec_reply(got.exec_server_message.id, write_result=a.WriteResult(success=ok))
                )
            end = await reader.wait_end(30)
    return prompt, end


def job_series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The /metrics samples of priced jobs (and the LLM calls' providers), by name and labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "job" in sample.name or sample.name == "cursor_byok_llm_calls_total":
                found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def series(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


async def spend(db: Path) -> tuple[float, list[Any]]:
    store = await open_store(str(db))
    try:
        (usage,) = await store.token_usage(*month_window(int(time.time() * 1000))[:2])
        calls = [c for c in await store.list_recent_llm_calls(100) if c.api == "image"]
    finally:
        await store.close()
    return usage.cost_usd, calls


async def test_images_are_charged_to_the_token_and_its_budget_holds(
    priced: tuple[ServerProcess, Path, str], upstream: FakeUpstream, images: FakeUpstream
) -> None:
    server, db, secret = priced
    for n in (1, 2):
        _, end = await image_turn(server, secret, f"fox number {n}")
        assert end == {}, end
    spent, charges = await spend(db)
    assert [(c.status, c.cost_usd, c.model) for c in charges] == [
        ("committed", PRICE_PER_IMAGE, "img-test-1")
    ] * 2
    assert {c.token_id for c in charges} == {charges[0].token_id} != {None}
    assert 2 * PRICE_PER_IMAGE < spent < 2 * PRICE_PER_IMAGE + 0.001  # the images and the calls
    # A third image would pass $0.10: it is not made, and the model reads why.
    prompt, end = await image_turn(server, secret, "fox number 3", made=False)
    assert end == {}, end
    assert not [r for r in images.requests if b"fox number 3" in r.body]
    second = chat_requests(upstream, prompt)[-1]
    (tool,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert "has too little of its monthly budget left" in str(tool["content"]), tool
    after, charges = await spend(db)
    assert len(charges) == 2 and after <= BUDGET
    # In /metrics (the operator's only): the two images made, their cost, by token name too;
    # never counted as LLM calls.
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        assert (await client.get("/metrics", headers=cc.auth_headers(secret))).status_code == 401
        got = job_series((await client.get("/metrics", headers=cc.auth_headers(OPERATOR))).text)
    image = {"kind": "image", "provider": "images", "model": "img-test-1"}
    assert got[("cursor_byok_job_charges_total", series(**image, outcome="ok"))] == 2
    assert got[("cursor_byok_job_cost_usd_total", series(**image))] == 2 * PRICE_PER_IMAGE
    ivy = series(token="ivy", kind="image")
    assert got[("cursor_byok_token_job_charges_total", ivy)] == 2
    assert got[("cursor_byok_token_job_cost_usd_total", ivy)] == 2 * PRICE_PER_IMAGE
    llm = [labels for name, labels in got if name == "cursor_byok_llm_calls_total"]
    assert llm and all(("provider", "images") not in labels for labels in llm), llm
