"""Output deadlines through the real server: an upstream that keeps the connection busy with
SSE comments and never answers ends the run with `unavailable`, naming the provider and the
setting, within the configured deadlines; a miss before any output is retried with the same
request bytes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.e2e.test_shim import ShimRun, chat_requests, http, run_request, unique
from tests.support.brain import answer
from tests.support.live import ServerProcess, ThreadedUpstream, brain_config, server_process
from tests.support.upstream import FakeUpstream, Received, Reply

DRIP = [bytes([b]) for b in b": keep-alive\n\n" * 40]  # one byte per chunk


def chunk(text: str) -> bytes:
    body = {"id": "c1", "model": "brain-1", "choices": [{"index": 0, "delta": {"content": text}}]}
    return f"data: {json.dumps(body)}\n\n".encode()


def dripping_brain(received: Received) -> Reply:
    """`[drip]`: comments a byte per 0.1 s, never content; `[drip-after]`: one text delta,
    then the same; anything else: the brain."""
    prompt = json.dumps(json.loads(received.body)["messages"][-1])
    if "[drip-after]" in prompt:
        return Reply(chunks=[chunk("Partial"), *DRIP], delay_s=0.1, hang_after=True)
    if "[drip]" in prompt:
        return Reply(chunks=DRIP, delay_s=0.1, hang_after=True)
    return answer(received)


@pytest.fixture(scope="module")
def dripper() -> Iterator[FakeUpstream]:
    with ThreadedUpstream(dripping_brain) as up:
        yield up


@pytest.fixture(scope="module")
def deadline_server(
    dripper: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("deadlines")
    config = brain_config(dripper.base_url, db=work / "byok.db").replace(
        'base_url = "' + dripper.base_url + '/v1"',
        'base_url = "' + dripper.base_url + '/v1"\n'
        "first_output_timeout_s = 0.5\nidle_timeout_s = 0.5",
    )
    assert "first_output_timeout_s" in config
    with server_process(config, work) as srv:
        yield srv


async def test_no_output_is_unavailable_naming_the_provider_and_retried(
    deadline_server: ServerProcess, dripper: FakeUpstream
) -> None:
    prompt = unique("[drip] hello")
    t0 = time.monotonic()
    async with http(deadline_server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            end = await reader.wait_end(30)
    took = time.monotonic() - t0
    error = end["error"]
    assert error["code"] == "unavailable", end
    assert error["message"].startswith("brain: no output within 0.5 s (first_output_timeout_s)"), (
        error
    )
    assert not reader.texts
    # A failure before output: retried (4 attempts in all), each with the same bytes.
    sent = [r.body for r in list(dripper.requests) if prompt.encode() in r.body]
    assert len(sent) == 4 and len(set(sent)) == 1, len(sent)
    assert len(chat_requests(dripper, prompt)) == 4
    assert took < 20, took  # 4 x 0.5 s plus the backoff sleeps, not the drip's minute


async def test_a_drip_after_output_is_unavailable_and_not_retried(
    deadline_server: ServerProcess, dripper: FakeUpstream
) -> None:
    prompt = unique("[drip-after] hello")
    t0 = time.monotonic()
    async with http(deadline_server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            end = await reader.wait_end(30)
    took = time.monotonic() - t0
    error = end["error"]
    assert error["code"] == "unavailable", end
    assert error["message"] == "brain: no output for 0.5 s (idle_timeout_s); gave up", error
    assert "".join(reader.texts) == "Partial"
    assert len(chat_requests(dripper, prompt)) == 1
    assert took < 10, took


async def test_a_normal_turn_is_untouched(deadline_server: ServerProcess) -> None:
    prompt = unique("plain")
    async with http(deadline_server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            end = await reader.wait_end(30)
    assert end == {} and "".join(reader.texts) == f"You said: {prompt}"
