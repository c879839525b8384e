"""A provider's own web search (llm/native_search.py) over real loopback HTTP: the recorded
search streams of each API replayed by a fake upstream; the request we send (the one tool, the
query, nothing of a conversation) and the hits decoded, exactly; failures as messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cursor_byok.llm.native_search import (
    INSTRUCTIONS,
    MAX_OUTPUT_TOKENS,
    NativeHit,
    NativeSearchFailed,
    NativeSearchResult,
    native_search,
)
from cursor_byok.llm.registry import ADAPTERS
from cursor_byok.llm.settings import ProviderSettings
from cursor_byok.llm.types import Usage
from tests.support.upstream import Received, Reply, fake_upstream, fixture_bytes

KEY = "sk-PLANTED-search-key-0123456789"
QUERY = "top world news today"


def provider(api: str, base_url: str, **kw: Any) -> ProviderSettings:
    return ProviderSettings(name=f"my-{api}", api=api, base_url=base_url, api_key=KEY, **kw)  # type: ignore[arg-type]


async def search(
    api: str, reply: Reply, *, model: str = "m-1", max_results: int = 8, timeout_s: float = 30.0
) -> tuple[NativeSearchResult | NativeSearchFailed, list[Received]]:
    async with fake_upstream() as up:
        up.push(reply)
        adapter = ADAPTERS[api](provider(api, up.base_url))
        try:
            outcome = await native_search(
                adapter, model, QUERY, max_results=max_results, timeout_s=timeout_s
            )
        finally:
            await adapter.aclose()
        return outcome, up.requests


def body(received: Received) -> Any:
    return json.loads(received.body)


# -- Anthropic --------------------------------------------------------------------------------


async def test_anthropic_request_is_the_search_tool_and_the_query_alone() -> None:
    reply = Reply.sse(fixture_bytes("anthropic", "web-search-citations.sse"), chunk_size=997)
    outcome, (sent,) = await search("anthropic", reply, model="claude-sonnet-4-5")
    assert isinstance(outcome, NativeSearchResult)
    assert sent.method == "POST" and sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY and sent.headers["anthropic-version"] == "2023-06-01"
    assert body(sent) == {
        "model": "claude-sonnet-4-5",
        "max_tokens": MAX_OUTPUT_TOKENS,
        "system": INSTRUCTIONS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": QUERY}]}],
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
        "stream": True,
    }


async def test_anthropic_hits_cited_first_with_cited_text_then_the_other_results() -> None:
    reply = Reply.sse(fixture_bytes("anthropic", "web-search-citations.sse"))
    outcome, _ = await search("anthropic", reply)
    assert isinstance(outcome, NativeSearchResult)
    assert outcome.usage == Usage(input=31772, output=644)
    assert [(h.url, h.title) for h in outcome.hits] == [
        # cited, in the order of their first citation (text blocks 6, 6, 10, 12, 14, 16, 20)
        ("https://www.npr.org/sections/news/", "News: U.S. and World News Headlines : NPR"),
        ("https://abcnews.go.com/", "ABC News – Breaking News, Latest News and Videos"),
        (
            "https://www.cnn.com/2025/07/14/us/5-things-to-know-for-july-14-immigration-gaza-"
            "epstein-files-kentucky-shooting-texas-flooding",
            "5 things to know for July 14: Immigration, Gaza, Epstein files, Kentucky shooting, "
            "Texas flooding | CNN",
        ),
        ("https://www.cnn.com/", "Breaking News, Latest News and Videos | CNN"),
        (
            "https://www.cbsnews.com/world/",
            "World news: Latest news, breaking news, today's news stories from around the "
            "world, updated daily from CBS News",
        ),
        ("https://edition.cnn.com/", "Breaking News, Latest News and Videos | CNN"),
        (
            "https://abcnews.go.com/International",
            "International News | Latest World News, Videos & Photos -ABC News - ABC News",
        ),
        # then the first search's results, in its order (max_results = 8)
        (
            "https://www.cnn.com/world",
            "World news - breaking news, video, headlines and opinion | CNN",
        ),
    ]
    npr, abc, *_, cnn_world = outcome.hits
    # Two citations of NPR (blocks 6 and 18), joined; ABC is cited with an empty cited_text.
    assert npr.snippet == (
        "Filip Singer/Getty Images Europe hide caption toggle caption Filip Singer/Getty Images "
        "Europe · August 13, 2025 \x95 President Trump will join European l... … Coverage of "
        "breaking stories, national and world news, politics, business, science, technology, "
        "and extended coverage of major national and world even..."
    )
    assert abc.snippet == "" and cnn_world.snippet == ""
    assert outcome.hits[5] == NativeHit(
        title="Breaking News, Latest News and Videos | CNN",
        url="https://edition.cnn.com/",
        snippet="Now, he could be fined for it · Aug 13, 2025 · Pinkfong!",
    )


async def test_anthropic_every_result_is_one_hit() -> None:
    reply = Reply.sse(fixture_bytes("anthropic", "web-search-citations.sse"))
    outcome, _ = await search("anthropic", reply, max_results=100)
    assert isinstance(outcome, NativeSearchResult)
    # 20 results in two searches; npr.org/sections/news/ is in both
    urls = [h.url for h in outcome.hits]
    assert len(urls) == 19 == len(set(urls))


def anthropic_stream(*blocks: dict[str, Any], stop: str = "end_turn") -> Reply:
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "usage": {}}}),
    ]
    for index, block in enumerate(blocks):
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop},
                "usage": {"output_tokens": 3},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return Reply(chunks=[f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in events])


async def test_anthropic_search_error_is_the_reason_for_no_hits() -> None:
    reply = anthropic_stream(
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": {"type": "web_search_tool_result_error", "error_code": "too_many_requests"},
        },
        {"type": "text", "text": "I could not search."},
    )
    outcome, _ = await search("anthropic", reply)
    assert outcome == NativeSearchFailed("my-anthropic: the web search failed (too_many_requests)")


async def test_hits_found_are_kept_past_a_refused_second_search_and_a_cut_answer() -> None:
    result = {"type": "web_search_result", "url": "https://a.example/", "title": "A"}
    reply = anthropic_stream(
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [result]},
        {"type": "server_tool_use", "id": "srvtoolu_2", "name": "web_search", "input": {}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_2",
            "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
        },
        {"type": "text", "text": "A says"},
        stop="max_tokens",
    )
    outcome, _ = await search("anthropic", reply)
    assert isinstance(outcome, NativeSearchResult)
    assert outcome.hits == (NativeHit(title="A", url="https://a.example/"),)


async def test_a_model_that_ran_no_search_is_a_failure() -> None:
    outcome, _ = await search("anthropic", Reply.sse(fixture_bytes("anthropic", "text-basic.sse")))
    assert outcome == NativeSearchFailed(
        "my-anthropic: the web search found nothing (or the model ran no search)"
    )


# -- OpenAI Responses -------------------------------------------------------------------------


async def test_responses_request_is_the_search_tool_and_the_query_alone() -> None:
    reply = Reply.sse(
        fixture_bytes("openai-responses", "web-search-annotations.sse"), chunk_size=4096
    )
    outcome, (sent,) = await search("openai-responses", reply, model="gpt-5-mini")
    assert isinstance(outcome, NativeSearchResult)
    assert sent.method == "POST" and sent.path == "/responses"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["accept"] == "text/event-stream"
    assert body(sent) == {
        "model": "gpt-5-mini",
        "instructions": INSTRUCTIONS,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": QUERY}]}],
        "tools": [{"type": "web_search"}],
        "include": ["web_search_call.action.sources"],
        "max_output_tokens": MAX_OUTPUT_TOKENS,
        "stream": True,
        "store": False,
    }


async def test_responses_hits_from_url_citations_then_the_searched_sources() -> None:
    reply = Reply.sse(fixture_bytes("openai-responses", "web-search-annotations.sse"))
    outcome, _ = await search("openai-responses", reply)
    assert isinstance(outcome, NativeSearchResult)
    assert outcome.usage == Usage(input=31073 - 3712, output=4416, cache_read=3712, reasoning=3712)
    tc = "https://techcrunch.com/2025/12/05/"
    assert [(h.url, h.title) for h in outcome.hits] == [
        (
            tc + "petco-confirms-security-lapse-exposed-customers-personal-data/",
            "Petco confirms security lapse exposed customers’ personal data | TechCrunch",
        ),
        (
            tc + "the-new-york-times-is-suing-perplexity-for-copyright-infringement/",
            "The New York Times is suing Perplexity for copyright infringement | TechCrunch",
        ),
        (
            tc + "meta-signs-commercial-ai-data-agreements-with-publishers-to-offer-real-time-"
            "news-on-meta-ai/",
            "Meta signs commercial AI data agreements with publishers to offer real-time news "
            "on Meta AI | TechCrunch",
        ),
        (
            tc + "netflix-to-acquire-warner-bros-in-a-disruptive-deal-valued-at-82-7b/",
            "Netflix to acquire Warner Bros. in a disruptive deal valued at $82.7B | TechCrunch",
        ),
        (
            "https://www.wired.com/story/the-big-interview-2025-recap",
            "Check Out Highlights From WIRED's Big Interview Event",
        ),
        (
            "https://techstartups.com/2025/12/05/technology-news-today-the-latest-in-tech-ai-"
            "startup-news-december-5-2025/",
            "Technology News Today – The Latest in Tech, AI & Startup News, December 5, 2025 - "
            "Tech Startups",
        ),
        (
            "https://finance.yahoo.com/news/ai-coding-startup-vercel-raises-163055044.html",
            "AI coding startup Vercel raises $300 million, valued at $9.3 billion",
        ),
        # the first uncited source of the first search: a url only, titled by its host
        ("https://www.barrons.com/articles/stock-movers-7c77880d", "www.barrons.com"),
    ]
    petco = outcome.hits[0]
    # The text before each citation link, back to its line's start: two citations, joined.
    assert petco.snippet.startswith(
        "Petco disclosed a customer-data exposure / security lapse. … TechCrunch — Petco "
        "data-breach article (Dec 5, 2025). I opened and searched the page: no mention of"
    )
    assert "utm_source" not in "".join(h.url for h in outcome.hits)
    assert outcome.hits[-1].snippet == ""


# -- Gemini -----------------------------------------------------------------------------------


async def test_gemini_request_is_the_grounding_tool_and_the_query_alone() -> None:
    reply = Reply.sse(fixture_bytes("gemini", "grounding-web-search.sse"), chunk_size=1500)
    outcome, (sent,) = await search("gemini", reply, model="gemini-2.5-pro")
    assert isinstance(outcome, NativeSearchResult)
    assert sent.path == "/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert sent.headers["x-goog-api-key"] == KEY and KEY not in sent.path
    assert body(sent) == {
        "systemInstruction": {"parts": [{"text": INSTRUCTIONS}]},
        "contents": [{"role": "user", "parts": [{"text": QUERY}]}],
        "tools": [{"google_search": {}}],
        "generationConfig": {"maxOutputTokens": MAX_OUTPUT_TOKENS},
    }


async def test_gemini_hits_from_grounding_chunks_with_their_supports() -> None:
    outcome, _ = await search(
        "gemini", Reply.sse(fixture_bytes("gemini", "grounding-web-search.sse"))
    )
    assert isinstance(outcome, NativeSearchResult)
    assert outcome.usage.input == 17 + 102 and outcome.usage.total == 772
    redirect = "https://vertexaisearch.cloud.google.com/grounding-api-redirect/"
    assert [
        (h.title, h.url[: len(redirect)] if h.url.startswith(redirect) else h.url)
        for h in outcome.hits
    ] == [
        (
            "Weather information for San Francisco, CA, US",
            "https://www.google.com/search?q=weather+in+San Francisco, CA,+US",
        ),
        ("timeanddate.com", redirect),
        ("weather.gov", redirect),
        ("wunderground.com", redirect),
        ("accuweather.com", redirect),
    ]
    assert outcome.hits[1].url.startswith(redirect + "AUZIYQE9XF-Y6nU0j1wObrFC2SexrS5DFq99jug8F3")
    assert [h.snippet for h in outcome.hits[1:]] == [
        "Another report indicates a temperature of 68°F with passing clouds. … Hourly forecasts "
        "show temperatures remaining in the low 70s during the afternoon before gradually "
        "cooling down in the evening.",
        "The forecast for the remainder of the day predicts sunny skies with highs ranging from "
        "the mid-60s to the lower 80s. … Tonight, the weather is expected to be partly cloudy "
        "with lows in the upper 50s.",
        "Some sources suggest the high could reach up to 85°F.",
        "Hourly forecasts show temperatures remaining in the low 70s during the afternoon "
        "before gradually cooling down in the evening.",
    ]


async def test_gemini_segment_without_text_is_read_from_its_byte_offsets() -> None:
    # "°" is two bytes in UTF-8: offsets count bytes, not characters.
    chunk = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "It is 20°C. Rain later."}]},
                "finishReason": "STOP",
                "groundingMetadata": {
                    "groundingChunks": [
                        {"web": {"uri": "https://example.org/w", "title": "example.org"}}
                    ],
                    "groundingSupports": [
                        {
                            "segment": {"startIndex": 13, "endIndex": 24},
                            "groundingChunkIndices": [0],
                        }
                    ],
                },
            }
        ],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8},
    }
    outcome, _ = await search("gemini", Reply.events([json.dumps(chunk)]))
    assert isinstance(outcome, NativeSearchResult)
    assert outcome.hits == (NativeHit("example.org", "https://example.org/w", "Rain later."),)


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "reply", "expected"),
    [
        (
            "anthropic",
            Reply.json(
                401,
                '{"type":"error","error":{"type":"authentication_error","message":"invalid '
                f'x-api-key {KEY}"}},"request_id":"req_1"}}',
            ),
            "my-anthropic HTTP 401: authentication_error: invalid x-api-key *** (request_id req_1)",
        ),
        (
            "openai-responses",
            Reply.json(429, '{"error":{"message":"Rate limit reached","type":"rate_limit"}}'),
            "my-openai-responses HTTP 429: rate_limit: Rate limit reached",
        ),
        (
            "gemini",
            Reply.json(500, '{"error":{"code":500,"message":"Internal","status":"INTERNAL"}}'),
            "my-gemini HTTP 500: INTERNAL: Internal",
        ),
    ],
)
async def test_http_errors_are_failures_without_the_key(
    api: str, reply: Reply, expected: str
) -> None:
    outcome, sent = await search(api, reply)
    assert len(sent) == 1  # no retry: the fallback list is the next attempt
    assert outcome == NativeSearchFailed(expected)
    assert KEY not in outcome.message


async def test_a_search_that_takes_too_long_is_cut() -> None:
    slow = Reply.sse(fixture_bytes("anthropic", "web-search-citations.sse"), delay_s=0.05)
    outcome, _ = await search("anthropic", slow, timeout_s=0.3)
    assert outcome == NativeSearchFailed("my-anthropic: the web search took longer than 0.3 s")


async def test_a_broken_stream_is_a_failure() -> None:
    outcome, _ = await search("openai-responses", Reply.events(["{not json"]))
    assert isinstance(outcome, NativeSearchFailed)
    assert outcome.message.startswith("my-openai-responses: could not decode the provider stream")


@pytest.mark.parametrize("api", ["openai-chat"])
async def test_an_api_without_search_sends_nothing(api: str) -> None:
    outcome, sent = await search(api, Reply.json(500, "{}"))
    assert outcome == NativeSearchFailed(
        "my-openai-chat: the openai-chat API has no web search of its own; a provider search "
        "backend needs a provider whose api is one of anthropic, openai-responses, gemini"
    )
    assert sent == []
