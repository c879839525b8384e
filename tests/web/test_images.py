"""The images endpoint client against a real loopback HTTP server: the request it sends, and
each way an answer can fail becoming a `JobFailed` the model reads; and the job dispatch."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from cursor_byok.llm.settings import ProviderSettings
from cursor_byok.web.fetch import PageFetcher
from cursor_byok.web.images import ImageMaker, size_for
from cursor_byok.web.jobs import job_runner
from cursor_byok.web.types import (
    ImageJob,
    ImageMade,
    JobFailed,
    PageFetchJob,
    WebSearchJob,
)
from tests.support.images import PNG

KEY = "sk-images-unit-0123456789"


class Endpoint:
    def __init__(self) -> None:
        self.answer: Any = None  # (status, body) or an awaitable delay
        self.seen: list[tuple[dict[str, str], Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((dict(request.headers), await request.json()))
        status, body = self.answer
        if status == "slow":
            await asyncio.sleep(body)
            status, body = 200, "{}"
        return web.Response(status=status, text=body, content_type="application/json")


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[Endpoint, str]]:
    ep = Endpoint()
    app = web.Application()
    app.router.add_post("/v1/images/generations", ep.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield ep, f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


def maker(base_url: str, **kwargs: Any) -> ImageMaker:
    provider = ProviderSettings(name="img", api="openai-chat", base_url=base_url, api_key=KEY)
    return ImageMaker(provider, model="img-1", **kwargs)


def b64(data: bytes) -> str:
    return json.dumps({"data": [{"b64_json": base64.b64encode(data).decode()}]})


async def test_the_request_and_a_good_answer(endpoint: tuple[Endpoint, str]) -> None:
    ep, url = endpoint
    ep.answer = (200, b64(PNG))
    got = await maker(url, extra_body={"quality": "low"}).make(
        ImageJob(description="a fox", aspect_ratio="3:4")
    )
    assert got == ImageMade(data=PNG, mime_type="image/png")
    ((headers, body),) = ep.seen
    assert body == {
        "model": "img-1",
        "prompt": "a fox",
        "n": 1,
        "size": "1024x1536",
        "quality": "low",
    }
    assert headers["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            (500, f'{{"error":{{"message":"bad key {KEY}"}}}}'),
            "the image endpoint answered HTTP 500: bad key ***",
        ),
        ((200, "not json"), "the image endpoint's answer is not JSON"),
        ((200, '{"data": []}'), "the image endpoint's answer has no image"),
        (
            (200, '{"data": [{"b64_json": "@@@"}]}'),
            "the image endpoint's image data is not valid base64",
        ),
        ((200, b64(b"plain text")), "the image endpoint's data is not a PNG, JPEG, GIF or WebP"),
        (
            (200, '{"data": [{"url": "https://x/y.png"}]}'),
            "the image endpoint answered with a URL, not the image data; set extra_body = "
            '{ response_format = "b64_json" } in [image_generation]',
        ),
        (("slow", 3), "the image endpoint gave no answer within 0.5 s"),
    ],
)
async def test_failures_are_job_failed(
    endpoint: tuple[Endpoint, str], answer: Any, message: str
) -> None:
    ep, url = endpoint
    ep.answer = answer
    # Only the slow answer is meant to meet the deadline: the others get room on a busy machine.
    timeout_s = 0.5 if answer[0] == "slow" else 10.0
    got = await maker(url, timeout_s=timeout_s).make(ImageJob(description="x"))
    assert got == JobFailed(message=message)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_from_the_endpoint_is_not_followed(status: int) -> None:
    """The operator's endpoint is trusted; where its answer points is not (the address
    policy's exemption ends at the configured URL): the redirect target gets nothing."""
    hits: list[str] = []

    async def moved(request: web.Request) -> web.Response:
        where = f"http://{request.host}/elsewhere"
        return web.Response(status=status, headers={"Location": where})

    async def elsewhere(request: web.Request) -> web.Response:
        hits.append(request.method)
        return web.Response(text=b64(PNG), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/images/generations", moved)
    app.router.add_route("*", "/elsewhere", elsewhere)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        got = await maker(url, timeout_s=10.0).make(ImageJob(description="x"))
    finally:
        await runner.cleanup()
    assert isinstance(got, JobFailed)
    assert got.message.startswith(f"the image endpoint answered HTTP {status}")
    assert hits == []


async def test_an_endpoint_that_is_not_there() -> None:
    got = await maker("http://127.0.0.1:9/v1").make(ImageJob(description="x"))
    assert isinstance(got, JobFailed)
    assert got.message.startswith("the image endpoint could not be reached (")


def test_sizes() -> None:
    assert [size_for(r) for r in ("1:1", "4:3", "16:9", "3:4", "9:16", "")] == [
        "1024x1024", "1536x1024", "1536x1024", "1024x1536", "1024x1536", None,
    ]  # fmt: skip


async def test_the_runner_sends_each_job_to_its_backend_and_never_raises() -> None:
    class Broken(PageFetcher):
        async def fetch(self, job: PageFetchJob) -> Any:
            raise RuntimeError("boom")

    run = job_runner(fetcher=PageFetcher(enabled=False))
    assert await run(WebSearchJob(query="q")) == JobFailed(
        message="this server has no web search configured"
    )
    assert await run(ImageJob(description="x")) == JobFailed(
        message="this server has no image generation configured"
    )
    assert await run(PageFetchJob(url="http://e.x/")) == JobFailed(
        message="this server does not fetch pages for clients ([web_fetch] server_side is off)"
    )
    broken = job_runner(fetcher=Broken(enabled=True))
    assert await broken(PageFetchJob(url="http://e.x/")) == JobFailed(
        message="the server failed to run the tool"
    )
