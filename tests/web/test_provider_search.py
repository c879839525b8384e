"""The "provider" search backend (web/search/provider.py) over real loopback HTTP: a WebSearch
job answered by a provider's own search as `SearchResults`, its failures as `JobFailed`; and
the configuration of such a backend (config_web.provider_search_spec).

The WebSearch tool machine is not on main yet, so this drives the backend directly, through
the registry's adapter as the server builds it, against a fake upstream replaying a recorded
search stream."""

from __future__ import annotations

import json
import logging

import pytest

from cursor_byok.config import parse_config
from cursor_byok.config_web import ProviderSearchFields, provider_search_spec
from cursor_byok.llm.registry import LLMRegistry
from cursor_byok.llm.settings import ProviderSettings
from cursor_byok.web.search.provider import ProviderSearch, ProviderSearchSpec
from cursor_byok.web.types import JobFailed, SearchHit, SearchResults, WebSearchJob
from tests.support.upstream import Reply, fake_upstream, fixture_bytes

KEY = "AIza-PLANTED-gemini-key-0123456789"


async def run(
    reply: Reply, query: str = "weather in San Francisco today", **kw: float
) -> tuple[SearchResults | JobFailed, list[bytes]]:
    registry = LLMRegistry()
    async with fake_upstream() as up:
        up.push(reply)
        provider = ProviderSettings(name="google", api="gemini", base_url=up.base_url, api_key=KEY)
        spec = ProviderSearchSpec(name="gsearch", provider=provider, model="gemini-2.5-flash")
        backend = ProviderSearch.of(spec, registry, timeout_s=kw.get("timeout_s", 30.0))
        try:
            outcome = await backend.search(WebSearchJob(query=query, model="sonnet"), 3)
        finally:
            await registry.aclose()
        return outcome, [r.body for r in up.requests]


async def test_a_search_job_becomes_search_results_of_the_backend() -> None:
    outcome, (sent,) = await run(Reply.sse(fixture_bytes("gemini", "grounding-web-search.sse")))
    redirect = "https://vertexaisearch.cloud.google.com/grounding-api-redirect/"
    assert isinstance(outcome, SearchResults) and outcome.backend == "gsearch"
    first, second, third = outcome.hits
    assert first == SearchHit(
        title="Weather information for San Francisco, CA, US",
        url="https://www.google.com/search?q=weather+in+San Francisco, CA,+US",
        snippet="As of Tuesday afternoon, the temperature is around 69°F (21°C), with a real feel "
        "of about 76°F (24°C) and humidity at approximately 68%. … There is a very low chance "
        "of rain throughout the day. … The chance of rain remains low throughout the day.",
    )
    assert (second.title, third.title) == ("timeanddate.com", "weather.gov")
    assert second.url.startswith(redirect) and third.url.startswith(redirect)
    # Only the query went out: no conversation, no model id of ours, no tool of the agent.
    request = json.loads(sent)
    assert request["contents"] == [
        {"role": "user", "parts": [{"text": "weather in San Francisco today"}]}
    ]
    assert request["tools"] == [{"google_search": {}}]
    assert b"sonnet" not in sent


async def test_an_http_error_is_a_job_failed_naming_the_backend_without_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = json.dumps({"error": {"code": 403, "message": f"key {KEY} denied", "status": "DENIED"}})
    with caplog.at_level(logging.INFO, logger="cursor_byok"):
        outcome, _ = await run(Reply.json(403, body))
    assert outcome == JobFailed("web search (gsearch): google HTTP 403: DENIED: key *** denied")
    assert KEY not in caplog.text


async def test_no_hits_is_a_job_failed() -> None:
    outcome, _ = await run(Reply.sse(fixture_bytes("gemini", "text-basic.sse")))
    assert outcome == JobFailed(
        "web search (gsearch): google: the web search found nothing (or the model ran no search)"
    )


async def test_a_slow_provider_is_a_job_failed() -> None:
    slow = Reply.sse(fixture_bytes("gemini", "grounding-web-search.sse"), delay_s=0.2)
    outcome, _ = await run(slow, timeout_s=0.3)
    assert outcome == JobFailed(
        "web search (gsearch): google: the web search took longer than 0.3 s"
    )


# -- configuration ----------------------------------------------------------------------------

PROVIDERS = """
[providers.claude]
api = "anthropic"
api_key_env = "ANTHROPIC_API_KEY"
[providers.oai]
api = "openai-chat"
api_key_env = "OPENAI_API_KEY"
"""
ENV = {"ANTHROPIC_API_KEY": "sk-ant-PLANTED", "OPENAI_API_KEY": "sk-PLANTED"}
KEY_PATH = "web_search.backend.claude-search"


def spec_of(provider: str | None, model: str | None) -> ProviderSearchSpec | list[str]:
    providers = parse_config(PROVIDERS, env=ENV).providers
    fields = ProviderSearchFields(provider=provider, model=model)
    return provider_search_spec(KEY_PATH, "claude-search", fields, providers, providers)


def test_a_provider_backend_resolves_to_its_provider_and_model() -> None:
    spec = spec_of("claude", " claude-sonnet-4-5 ")
    assert isinstance(spec, ProviderSearchSpec)
    assert (spec.name, spec.provider.name, spec.provider.api) == (
        "claude-search",
        "claude",
        "anthropic",
    )
    assert spec.model == "claude-sonnet-4-5"
    assert "sk-ant-PLANTED" not in repr(spec)


@pytest.mark.parametrize(
    ("provider", "model", "errors"),
    [
        (
            "oai",
            "gpt-5",
            [
                f"{KEY_PATH}.provider: 'oai' cannot search: the openai-chat API has no web search "
                "of its own; a provider search backend needs a provider whose api is one of "
                "anthropic, openai-responses, gemini"
            ],
        ),
        (
            "claud",
            "m",
            [
                f"{KEY_PATH}.provider: unknown provider 'claud' (providers: claude, oai); did you "
                "mean 'claude'?"
            ],
        ),
        (
            None,
            "",
            [
                f'{KEY_PATH}.provider is required for kind = "provider": a [providers.NAME] whose '
                "api is anthropic, openai-responses or gemini",
                f'{KEY_PATH}.model is required for kind = "provider": the upstream model id the '
                "search call uses (e.g. claude-sonnet-4-5, gpt-5-mini, gemini-2.5-flash)",
            ],
        ),
    ],
)
def test_a_provider_backend_with_mistakes_lists_each(
    provider: str | None, model: str | None, errors: list[str]
) -> None:
    assert spec_of(provider, model) == errors


def test_a_broken_provider_is_not_reported_twice() -> None:
    fields = ProviderSearchFields(provider="gone", model="m")
    assert provider_search_spec(KEY_PATH, "x", fields, {}, {"gone": object()}, {"gone"}) == []
