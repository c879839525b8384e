"""WebSearch end to end (reference §2.14) against the REAL server process, over `Run` on
HTTP/2 and the HTTP/1.1 shim, with our own client playing the IDE and loopback fakes of
SearXNG, Brave and Tavily (tests/support/search_fakes.py, shaped as their documentation says).

Each test checks the approval query, the tool_call_started and tool_call_completed cards (the
references), the text the model reads in the next upstream request, and turn_ended: a
SearXNG answer; a SearXNG 500 falling back to the keyed Brave API (its key header checked);
a rejection; every backend failing (a timeout, bad JSON); the per-model list (Tavily); and no
backend configured (the tool is not offered). The key never reaches the server's log."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from cursor_byok.loop.catalogue import Mode, Switches, offered
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_queries import (
    TRANSPORTS,
    cards,
    ide,
    query_of,
    respond,
    tool_messages,
    tool_names,
    tool_prompt,
)
from tests.e2e.test_shim import chat_requests, run_request
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.search_fakes import (
    BRAVE_KEY,
    PATHS,
    TAVILY_KEY,
    SearchFakes,
    ThreadedSearchFakes,
    results_for,
)
from tests.support.upstream import FakeUpstream

BACKEND_TIMEOUT_S = 2


@pytest.fixture(scope="module")
def fakes() -> Iterator[SearchFakes]:
    with ThreadedSearchFakes() as f:
        yield f


def search_config(upstream_url: str, db: str, fakes: SearchFakes) -> str:
    # brain_config ends inside [models."composer-test"]: its own list comes first.
    return (
        brain_config(upstream_url, db=db)
        + f"""web_search = ["tav"]

[web_search]
backends = ["searx", "brave"]
timeout_s = {BACKEND_TIMEOUT_S}
max_results = 2

[web_search.backend.searx]
kind = "searxng"
url = "{fakes.base_url}"

[web_search.backend.brave]
kind = "brave"
url = "{fakes.base_url}{PATHS["brave"]}"
api_key_env = "TEST_BRAVE_KEY"

[web_search.backend.tav]
kind = "tavily"
url = "{fakes.base_url}{PATHS["tavily"]}"
api_key_env = "TEST_TAVILY_KEY"
"""
    )


@pytest.fixture(scope="module")
def wserver(
    upstream: FakeUpstream, fakes: SearchFakes, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("websearch")
    config = search_config(upstream.base_url, str(work / "db"), fakes)
    env = {"TEST_BRAVE_KEY": BRAVE_KEY, "TEST_TAVILY_KEY": TAVILY_KEY}
    with server_process(config, work, env=env) as srv:
        yield srv
    assert BRAVE_KEY not in srv.log() and TAVILY_KEY not in srv.log()


@pytest.fixture(autouse=True)
def healthy(fakes: SearchFakes) -> None:
    fakes.behaviour.clear()


OFFERED = list(offered(Mode.AGENT, Switches(web_search_enabled=True, web_search_configured=True)))
assert "WebSearch" in OFFERED


def search_request(term: str, model: str = "brain-1") -> tuple[str, a.AgentClientMessage]:
    prompt = tool_prompt("WebSearch", {"search_term": term, "explanation": "to check"})
    message = run_request(prompt, model=model)
    message.run_request.action.user_message_action.request_context.web_search_enabled = True
    return prompt, message


def references_text(term: str, n: int = 2) -> str:
    lines = [f"Web search results for {term!r}:"]
    for i, (title, url, snippet) in enumerate(results_for(term, n), 1):
        plain = snippet.replace("<b>", "").replace("</b>", "")
        lines += [f"{i}. {title} — {url}", f"   {plain}"]
    return "\n".join(lines)


def expected_references(term: str, n: int = 2) -> list[tuple[str, str, str]]:
    return [(t, u, c.replace("<b>", "").replace("</b>", "")) for t, u, c in results_for(term, n)]


async def search_turn(
    server: ServerProcess,
    transport: str,
    term: str,
    answer: a.WebSearchRequestResponse,
    model: str = "brain-1",
) -> tuple[str, a.ToolCall, a.ToolCall, list[str]]:
    """One turn: the model calls WebSearch, the IDE answers the approval with `answer`.
    Returns (prompt, started card, completed card, the model's text)."""
    prompt, message = search_request(term, model)
    async with ide(server, transport) as (send, reader):
        await send(message)
        asked = await reader.wait_for(query_of("web_search_request_query"))
        query = asked.interaction_query.web_search_request_query
        assert query == a.WebSearchRequestQuery(
            args=a.WebSearchArgs(search_term=term, tool_call_id="call_t1")
        )
        response = respond(asked.interaction_query.id, web_search_request_response=answer)
        await send(response)
        end = await reader.wait_end(60)
    assert end == {} and reader.turn_ended
    (started,) = cards(reader, "tool_call_started")
    (done,) = cards(reader, "tool_call_completed")
    for card in (started, done):
        assert card.WhichOneof("tool") == "web_search_tool_call"
        assert card.web_search_tool_call.args == query.args
    assert not started.web_search_tool_call.HasField("result")
    return prompt, started, done, reader.texts


def model_reads(upstream: FakeUpstream, prompt: str) -> str:
    """The tool result in the second upstream request, which extends the first."""
    first, second = chat_requests(upstream, prompt)
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert tool_names(first) == tool_names(second) == OFFERED
    (text,) = tool_messages(second)
    return text


APPROVED = a.WebSearchRequestResponse(approved=a.WebSearchRequestResponse.Approved())


def unique_term(topic: str) -> str:
    return f"{topic} {uuid.uuid4().hex[:6]}"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_approved_search_is_answered_by_searxng(
    wserver: ServerProcess, upstream: FakeUpstream, fakes: SearchFakes, transport: str
) -> None:
    term = unique_term("python release notes")
    prompt, _, done, texts = await search_turn(wserver, transport, term, APPROVED)
    result = done.web_search_tool_call.result
    assert result.WhichOneof("result") == "success"
    refs = [(r.title, r.url, r.chunk) for r in result.success.references]
    assert refs == expected_references(term)
    assert model_reads(upstream, prompt) == references_text(term)
    assert "".join(texts).endswith(f"The tool said: {references_text(term)[:200]}")
    (seen,) = [r for r in fakes.of("searxng") if r.query.get("q") == term]
    assert seen.query == {"q": term, "format": "json"}
    assert not [r for r in fakes.of("brave") if r.query.get("q") == term]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_failing_searxng_falls_back_to_the_keyed_api(
    wserver: ServerProcess, upstream: FakeUpstream, fakes: SearchFakes, transport: str
) -> None:
    fakes.behaviour["searxng"] = "500"
    term = unique_term("tokio runtime")
    prompt, _, done, _ = await search_turn(wserver, transport, term, APPROVED)
    result = done.web_search_tool_call.result
    assert [(r.title, r.url, r.chunk) for r in result.success.references] == (
        expected_references(term)
    )
    assert model_reads(upstream, prompt) == references_text(term)
    (brave,) = [r for r in fakes.of("brave") if r.query.get("q") == term]
    assert brave.key_ok is True and brave.query == {"q": term, "count": "2"}
    assert len([r for r in fakes.of("searxng") if r.query.get("q") == term]) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_rejected_search_is_an_error_result_and_searches_nothing(
    wserver: ServerProcess, upstream: FakeUpstream, fakes: SearchFakes, transport: str
) -> None:
    term = unique_term("private thing")
    rejected = a.WebSearchRequestResponse(
        rejected=a.WebSearchRequestResponse.Rejected(reason="no web access today")
    )
    prompt, _, done, _ = await search_turn(wserver, transport, term, rejected)
    result = done.web_search_tool_call.result
    assert result.WhichOneof("result") == "rejected"
    assert result.rejected.reason == "no web access today"
    assert model_reads(upstream, prompt) == "The user declined the web search: no web access today"
    assert not [r for r in fakes.seen if term in (r.query.get("q"), (r.body or {}).get("query"))]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_when_every_backend_fails_the_model_reads_why(
    wserver: ServerProcess, upstream: FakeUpstream, fakes: SearchFakes, transport: str
) -> None:
    fakes.slow_s = BACKEND_TIMEOUT_S + 3
    fakes.behaviour.update(searxng="slow", brave="badjson")
    term = unique_term("slow engines")
    prompt, _, done, _ = await search_turn(wserver, transport, term, APPROVED)
    text = (
        f"Error: the web search failed: search backend 'searx' gave no answer within "
        f"{BACKEND_TIMEOUT_S} s; search backend 'brave' answered with something that is not JSON"
    )
    result = done.web_search_tool_call.result
    assert result.WhichOneof("result") == "error" and result.error.error == text
    assert model_reads(upstream, prompt) == text


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_model_with_its_own_list_searches_with_it(
    wserver: ServerProcess, upstream: FakeUpstream, fakes: SearchFakes, transport: str
) -> None:
    term = unique_term("per model")
    prompt, _, done, _ = await search_turn(wserver, transport, term, APPROVED, "composer-test")
    refs = done.web_search_tool_call.result.success.references
    assert [(r.title, r.url, r.chunk) for r in refs] == expected_references(term)
    assert model_reads(upstream, prompt) == references_text(term)
    (tavily,) = [r for r in fakes.of("tavily") if (r.body or {}).get("query") == term]
    assert tavily.key_ok is True and tavily.body == {"query": term, "max_results": 2}
    assert not [r for r in fakes.of("searxng") if r.query.get("q") == term]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_without_a_backend_web_search_is_not_offered(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt, message = search_request(unique_term("nothing configured"))
    async with ide(server, transport) as (send, reader):
        await send(message)
        end = await reader.wait_end(60)
    assert end == {} and reader.turn_ended
    first, second = chat_requests(upstream, prompt)
    assert "WebSearch" not in tool_names(first)
    assert tool_names(first) == list(offered(Mode.AGENT, Switches(web_search_enabled=True)))
    # A model that calls it anyway reads the loop's own error; nothing asks the IDE.
    assert not [m for m in reader.messages if query_of("web_search_request_query")(m)]
    (text,) = tool_messages(second)
    assert text.startswith(
        "Error: WebSearch is switched off for this conversation. Available tools: Shell, Read"
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_client_that_does_not_enable_web_search_is_not_offered_it(
    wserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = tool_prompt("WebSearch", {"search_term": "x"})
    async with ide(wserver, transport) as (send, reader):
        await send(run_request(prompt))
        end = await reader.wait_end(60)
    assert end == {} and reader.turn_ended
    assert "WebSearch" not in tool_names(chat_requests(upstream, prompt)[0])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_next_turn_extends_the_search_turn_byte_for_byte(
    wserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """The search result is an ordinary tool result in our history: the next turn's request
    begins with every message of the search turn's last request, tools and system unchanged."""
    term = unique_term("prefix check")
    prompt, message = search_request(term)
    cid = message.run_request.conversation_id
    async with ide(wserver, transport) as (send, reader):
        await send(message)
        asked = await reader.wait_for(query_of("web_search_request_query"))
        await send(respond(asked.interaction_query.id, web_search_request_response=APPROVED))
        assert await reader.wait_end(60) == {}
    follow = unique_term("and now summarise")
    second = run_request(follow, cid)
    second.run_request.action.user_message_action.request_context.web_search_enabled = True
    async with ide(wserver, transport) as (send, reader):
        await send(second)
        assert await reader.wait_end(60) == {} and reader.turn_ended
    _, searched = chat_requests(upstream, prompt)
    (next_turn,) = chat_requests(upstream, follow)
    assert next_turn["messages"][: len(searched["messages"])] == searched["messages"]
    assert next_turn["tools"] == searched["tools"]
    assert references_text(term) in tool_messages(next_turn)
