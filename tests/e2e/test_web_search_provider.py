"""WebSearch answered by a provider's own search (backend kind "provider"), end to end: the
REAL server process, `Run` on HTTP/2 and the HTTP/1.1 shim, our client playing the IDE. After
the approval the server makes one search-only call to a configured Anthropic provider (a
loopback fake replaying a recorded web-search stream); the hits become the card's references
and the text the model reads; nothing of the conversation goes to the search call, nothing
provider-specific comes back into the history."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from cursor_byok.store import open_store
from tests.e2e.test_job_charges import job_series, series
from tests.e2e.test_queries import TRANSPORTS, cards, ide, query_of, respond, tool_messages
from tests.e2e.test_shim import chat_requests
from tests.e2e.test_web_search import APPROVED, search_request
from tests.support.live import ServerProcess, ThreadedUpstream, brain_config, server_process
from tests.support.upstream import FakeUpstream, Reply, fixture_bytes

KEY = "sk-ant-PLANTED-search-key-0123456789"
RECORDED = fixture_bytes("anthropic", "web-search-citations.sse")


@pytest.fixture(scope="module")
def claude() -> Iterator[FakeUpstream]:
    with ThreadedUpstream(default=lambda _request: Reply.sse(RECORDED, chunk_size=997)) as up:
        yield up


@pytest.fixture(scope="module")
def pserver(
    upstream: FakeUpstream, claude: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("provider-search")
    config = (
        brain_config(upstream.base_url, db=work / "db")
        + f"""
[providers.claude]
api = "anthropic"
base_url = "{claude.base_url}"
api_key_env = "TEST_CLAUDE_KEY"

[web_search]
backends = ["claude-search"]
max_results = 3

[web_search.backend.claude-search]
kind = "provider"
provider = "claude"
model = "claude-sonnet-4-5"
price_per_search = 0.01
"""
    )
    with server_process(config, work, env={"TEST_CLAUDE_KEY": KEY}) as srv:
        yield srv
    assert KEY not in srv.log()


HITS = [
    ("https://www.npr.org/sections/news/", "News: U.S. and World News Headlines : NPR"),
    ("https://abcnews.go.com/", "ABC News – Breaking News, Latest News and Videos"),
    (
        "https://www.cnn.com/2025/07/14/us/5-things-to-know-for-july-14-immigration-gaza-"
        "epstein-files-kentucky-shooting-texas-flooding",
        "5 things to know for July 14: Immigration, Gaza, Epstein files, Kentucky shooting, "
        "Texas flooding | CNN",
    ),
]


CITED = [True, False, True]  # the recorded answer cites no text of the second source


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_approved_search_is_answered_by_the_providers_own_search(
    pserver: ServerProcess, upstream: FakeUpstream, claude: FakeUpstream, transport: str
) -> None:
    term = f"top world news today {uuid.uuid4().hex[:6]}"
    prompt, message = search_request(term)
    before = len(claude.requests)
    async with ide(pserver, transport) as (send, reader):
        await send(message)
        asked = await reader.wait_for(query_of("web_search_request_query"))
        assert asked.interaction_query.web_search_request_query.args.search_term == term
        assert len(claude.requests) == before  # nothing is searched before the approval
        await send(respond(asked.interaction_query.id, web_search_request_response=APPROVED))
        assert await reader.wait_end(60) == {} and reader.turn_ended
    # One search-only call: the query alone, the search tool, none of the conversation.
    (call,) = claude.requests[before:]
    assert call.path == "/v1/messages" and call.headers["x-api-key"] == KEY
    sent = json.loads(call.body)
    assert sent["model"] == "claude-sonnet-4-5"
    (only,) = sent["messages"]
    assert only["role"] == "user" and term in json.dumps(only)
    assert [t["type"] for t in sent["tools"]] == ["web_search_20250305"]
    assert prompt not in call.body.decode()
    (done,) = cards(reader, "tool_call_completed")
    refs = done.web_search_tool_call.result.success.references
    assert [(r.url, r.title) for r in refs] == HITS
    assert [bool(r.chunk) for r in refs] == CITED  # a cited source's snippet: its cited text
    _first, second = chat_requests(upstream, prompt)
    (text,) = tool_messages(second)
    assert text.startswith(f"Web search results for {term!r}:\n1. {HITS[0][1]} — {HITS[0][0]}")
    assert "server_tool_use" not in json.dumps(second) and "encrypted" not in json.dumps(second)
    # Priced per search: the search's own row, at the backend's price (web/prices.py).
    store = await open_store(str(pserver.log_path.parent / "db"))
    try:
        calls = await store.list_recent_llm_calls(200)
    finally:
        await store.close()
    rows = [
        (c.status, c.cost_usd, c.model)
        for c in calls
        if c.api == "search" and term.encode() in c.request
    ]
    assert rows == [("committed", 0.01, "claude-search")]
    # In /metrics: every search charged so far (one per transport), never as an LLM call.
    done = sum(c.api == "search" and c.status == "committed" for c in calls)
    async with httpx.AsyncClient(base_url=pserver.url, timeout=10) as client:
        got = job_series((await client.get("/metrics")).text)
    search = {"kind": "search", "provider": "web_search", "model": "claude-search"}
    assert got[("cursor_byok_job_charges_total", series(**search, outcome="ok"))] == done
    assert got[("cursor_byok_job_cost_usd_total", series(**search))] == pytest.approx(0.01 * done)
    assert not [n for n, labels in got if ("model", "claude-search") in labels and "llm" in n]


async def test_a_provider_error_is_an_error_result_the_model_reads(
    pserver: ServerProcess, upstream: FakeUpstream, claude: FakeUpstream
) -> None:
    body = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
    claude.push(*[Reply.json(529, body)] * 8)  # every retry sees it
    term = f"rust release {uuid.uuid4().hex[:6]}"
    prompt, message = search_request(term)
    async with ide(pserver, "shim") as (send, reader):
        await send(message)
        asked = await reader.wait_for(query_of("web_search_request_query"))
        await send(respond(asked.interaction_query.id, web_search_request_response=APPROVED))
        assert await reader.wait_end(90) == {} and reader.turn_ended
    (done,) = cards(reader, "tool_call_completed")
    assert done.web_search_tool_call.result.WhichOneof("result") == "error"
    _first, second = chat_requests(upstream, prompt)
    (text,) = tool_messages(second)
    assert "claude-search" in text and "529" in text and KEY not in text
    claude._script.clear()  # the retries may not have used them all: leave none behind
