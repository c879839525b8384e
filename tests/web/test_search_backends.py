"""The search backends over real HTTP against loopback fakes shaped as each API's
documentation says (tests/support/search_fakes.py cites them): the request each sends (query,
format, count, the key header), the hits parsed, and every failure (4xx/5xx, timeout, bad
JSON, an oversized body, no server) as a JobFailed that names the backend and never its key.
Then the ordered fallback, the per-model order, and the job runner's dispatch."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from cursor_byok.launch import free_port
from cursor_byok.web.jobs import job_runner
from cursor_byok.web.search import WebSearch
from cursor_byok.web.search.brave import Brave
from cursor_byok.web.search.searxng import Searxng
from cursor_byok.web.search.settings import (
    BraveSpec,
    SearxngSpec,
    TavilySpec,
    WebSearchSettings,
)
from cursor_byok.web.search.tavily import Tavily
from cursor_byok.web.types import (
    ImageJob,
    JobFailed,
    PageFetchJob,
    SearchHit,
    SearchResults,
    WebSearchJob,
)
from tests.support.search_fakes import BRAVE_KEY, PATHS, TAVILY_KEY, SearchFakes

JOB = WebSearchJob(query="rust async traits", model="m")


@pytest.fixture
async def fakes() -> AsyncIterator[SearchFakes]:
    f = await SearchFakes().start()
    yield f
    await f.stop()


def specs(f: SearchFakes) -> dict[str, SearxngSpec | BraveSpec | TavilySpec]:
    return {
        "searx": SearxngSpec(name="searx", url=f.base_url),
        "brave": BraveSpec(name="brave", api_key=BRAVE_KEY, url=f.base_url + PATHS["brave"]),
        "tavily": TavilySpec(name="tavily", api_key=TAVILY_KEY, url=f.base_url + PATHS["tavily"]),
    }


def expected_hits(n: int) -> tuple[SearchHit, ...]:
    return tuple(
        SearchHit(
            title=f"Result {i} for rust async traits",
            url=f"https://example.org/rust-async-traits/{i}",
            snippet=f"About rust async traits, part {i}.",  # the <b> markup is gone
        )
        for i in range(1, n + 1)
    )


async def test_searxng_asks_the_json_api_and_reads_its_results(fakes: SearchFakes) -> None:
    backend = Searxng(specs(fakes)["searx"], timeout_s=5)
    outcome = await backend.search(JOB, 2)
    assert outcome == SearchResults(hits=expected_hits(2), backend="searx")
    (seen,) = fakes.of("searxng")
    assert seen.method == "GET" and seen.query == {"q": "rust async traits", "format": "json"}


async def test_brave_sends_its_key_header_and_the_count(fakes: SearchFakes) -> None:
    backend = Brave(specs(fakes)["brave"], timeout_s=5)
    outcome = await backend.search(JOB, 2)
    assert outcome == SearchResults(hits=expected_hits(2), backend="brave")
    (seen,) = fakes.of("brave")
    assert seen.key_ok is True and seen.query == {"q": "rust async traits", "count": "2"}
    assert BRAVE_KEY not in repr(backend)


async def test_tavily_posts_the_query_with_its_bearer_key(fakes: SearchFakes) -> None:
    backend = Tavily(specs(fakes)["tavily"], timeout_s=5)
    outcome = await backend.search(JOB, 3)
    assert outcome == SearchResults(hits=expected_hits(3), backend="tavily")
    (seen,) = fakes.of("tavily")
    assert seen.key_ok is True and seen.body == {"query": "rust async traits", "max_results": 3}


async def test_a_wrong_key_is_a_refusal_that_never_shows_the_key(fakes: SearchFakes) -> None:
    wrong = BraveSpec(name="brave", api_key="wrong-key-0000", url=fakes.base_url + PATHS["brave"])
    outcome = await Brave(wrong, timeout_s=5).search(JOB, 2)
    assert outcome == JobFailed(
        message="search backend 'brave' refused the request (HTTP 401): check its key or settings"
    )
    assert fakes.of("brave")[0].key_ok is False


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("500", "search backend 'searx' answered HTTP 500"),
        ("badjson", "search backend 'searx' answered with something that is not JSON"),
        ("huge", "search backend 'searx' answered more than 4194304 bytes; not read"),
        (
            "redirect",
            "search backend 'searx' answered HTTP 301, a redirect (not followed): set its url "
            "to the address it redirects to",
        ),
        (
            "403",
            "search backend 'searx' refused the request (HTTP 403): check its key or settings "
            "(is the json format enabled in its settings.yml?)",
        ),
    ],
)
async def test_failures_are_clear_job_failures(
    fakes: SearchFakes, behaviour: str, message: str
) -> None:
    fakes.behaviour["searxng"] = behaviour
    outcome = await Searxng(specs(fakes)["searx"], timeout_s=5).search(JOB, 2)
    assert outcome == JobFailed(message=message)


async def test_a_backend_that_does_not_answer_in_time_fails_within_its_timeout(
    fakes: SearchFakes,
) -> None:
    fakes.behaviour["tavily"] = "slow"
    fakes.slow_s = 3
    t0 = time.monotonic()
    outcome = await Tavily(specs(fakes)["tavily"], timeout_s=0.5).search(JOB, 2)
    assert outcome == JobFailed(message="search backend 'tavily' gave no answer within 0.5 s")
    assert time.monotonic() - t0 < 5  # wide margin: the machine is shared


async def test_no_server_is_an_unreachable_backend() -> None:
    port = free_port()
    spec = SearxngSpec(name="searx", url=f"http://127.0.0.1:{port}")
    outcome = await Searxng(spec, timeout_s=5).search(JOB, 2)
    assert outcome == JobFailed(message=f"search backend 'searx' is unreachable (127.0.0.1:{port})")


def search_over(f: SearchFakes, order: tuple[str, ...], **per_model: tuple[str, ...]) -> WebSearch:
    settings = WebSearchSettings(
        backends=dict(specs(f)), order=order, per_model=dict(per_model), timeout_s=2, max_results=2
    )
    return WebSearch(settings)


async def test_the_first_backend_that_answers_wins(fakes: SearchFakes) -> None:
    fakes.behaviour["searxng"] = "500"
    outcome = await search_over(fakes, ("searx", "brave", "tavily")).search(JOB)
    assert outcome == SearchResults(hits=expected_hits(2), backend="brave")
    assert len(fakes.of("searxng")) == 1 and len(fakes.of("brave")) == 1
    assert fakes.of("tavily") == []  # never asked: brave answered


async def test_when_every_backend_fails_the_message_lists_each(fakes: SearchFakes) -> None:
    fakes.behaviour.update(searxng="500", brave="badjson")
    outcome = await search_over(fakes, ("searx", "brave")).search(JOB)
    assert outcome == JobFailed(
        message="the web search failed: search backend 'searx' answered HTTP 500; "
        "search backend 'brave' answered with something that is not JSON"
    )


async def test_a_model_with_its_own_list_uses_it(fakes: SearchFakes) -> None:
    search = search_over(fakes, ("searx",), m=("tavily", "searx"))
    assert (await search.search(JOB)).backend == "tavily"  # type: ignore[union-attr]
    other = WebSearchJob(query="rust async traits", model="other")
    assert (await search.search(other)).backend == "searx"  # type: ignore[union-attr]
    assert len(fakes.of("tavily")) == 1 and len(fakes.of("searxng")) == 1


async def test_the_job_runner_dispatches_on_the_job_type(fakes: SearchFakes) -> None:
    run = job_runner(search=search_over(fakes, ("searx",)))
    assert (await run(JOB)) == SearchResults(hits=expected_hits(2), backend="searx")
    assert isinstance(await run(PageFetchJob(url="https://example.org")), JobFailed)
    assert isinstance(await run(ImageJob(description="a cat")), JobFailed)
    assert (await job_runner()(JOB)) == JobFailed(
        message="this server has no web search configured"
    )
