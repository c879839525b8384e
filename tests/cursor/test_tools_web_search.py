"""WebSearch on the dialect's side (reference §2.14): the approval query under an interaction
id, the server job an approval starts (with the run's model id), and the card and text each
outcome gives: references, a rejection, a failed search, a wrong answer."""

from __future__ import annotations

from cursor_byok.llm.types import ToolCall
from cursor_byok.transport.cursor import ClientLink, ToolFinished, ToolProgress
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import (
    Ignored,
    Phase,
    QueryMachine,
    Send,
    machine_for,
)
from cursor_byok.transport.cursor.tools.web_search import search_text
from cursor_byok.web.types import JobFailed, SearchHit, SearchResults, WebSearchJob

HITS = (
    SearchHit(title="Python 3.14 released", url="https://python.org/3.14", snippet="Today..."),
    SearchHit(title="", url="https://example.com/x", snippet=""),
)


def link(model: str = "brain-1") -> ClientLink:
    lk = ClientLink(conversation_id="conv", now_ms=lambda: 1_700_000_000_000)
    lk.model_id = model
    return lk


def start(lk: ClientLink, **args: object) -> tuple[a.ToolCall, a.InteractionQuery]:
    call = ToolCall(id="toolu_1", name="WebSearch", arguments=dict(args))
    started = lk.start_tool("op", call, llm_call_id="conv:1:llm1", content_index=0)
    assert started.early is None
    first, query = (a.AgentServerMessage.FromString(f) for f in started.frames)
    assert first.interaction_update.WhichOneof("message") == "tool_call_started"
    assert query.WhichOneof("message") == "interaction_query"
    return first.interaction_update.tool_call_started.tool_call, query.interaction_query


def respond(query_id: int, **variant: object) -> a.AgentClientMessage:
    response = a.WebSearchRequestResponse(**variant)
    answer = a.InteractionResponse(id=query_id, web_search_request_response=response)
    return a.AgentClientMessage(interaction_response=answer)


APPROVED = {"approved": a.WebSearchRequestResponse.Approved()}
ARGS = a.WebSearchArgs(search_term="python 3.14 release", tool_call_id="toolu_1")


def card_of(done: ToolFinished) -> a.ToolCall:
    update = a.AgentServerMessage.FromString(done.card).interaction_update
    assert update.WhichOneof("message") == "tool_call_completed"
    tc = update.tool_call_completed.tool_call
    assert tc.WhichOneof("tool") == "web_search_tool_call"
    assert tc.web_search_tool_call.args == ARGS
    return tc


def test_approval_runs_the_search_and_the_card_carries_the_references() -> None:
    lk = link("model-x")
    started, query = start(lk, search_term=" python 3.14 release ", explanation="news")
    assert started.web_search_tool_call.args == ARGS
    assert query.WhichOneof("query") == "web_search_request_query"
    assert query.web_search_request_query == a.WebSearchRequestQuery(args=ARGS)
    progress = lk.receive(respond(query.id, **APPROVED))
    assert isinstance(progress, ToolProgress) and progress.frames == ()
    assert progress.job == WebSearchJob(query="python 3.14 release", model="model-x")
    done = lk.deliver_job("op", SearchResults(hits=HITS, backend="searx"))
    assert isinstance(done, ToolFinished) and not done.result.is_error
    result = card_of(done).web_search_tool_call.result
    assert result.WhichOneof("result") == "success"
    assert [(r.title, r.url, r.chunk) for r in result.success.references] == [
        ("Python 3.14 released", "https://python.org/3.14", "Today..."),
        ("", "https://example.com/x", ""),
    ]
    assert done.result.text == (
        "Web search results for 'python 3.14 release':\n"
        "1. Python 3.14 released — https://python.org/3.14\n"
        "   Today...\n"
        "2. https://example.com/x — https://example.com/x"
    )
    assert not lk.tool_running("op")


def test_no_hits_is_a_success_with_no_references() -> None:
    lk = link()
    _, query = start(lk, search_term="python 3.14 release")
    lk.receive(respond(query.id, **APPROVED))
    done = lk.deliver_job("op", SearchResults(hits=(), backend="searx"))
    assert isinstance(done, ToolFinished) and not done.result.is_error
    result = card_of(done).web_search_tool_call.result
    assert result.WhichOneof("result") == "success" and not result.success.references
    assert done.result.text == "The web search for 'python 3.14 release' found no results."


def test_a_rejection_is_an_error_result_and_nothing_is_searched() -> None:
    lk = link()
    _, query = start(lk, search_term="python 3.14 release")
    rejected = a.WebSearchRequestResponse.Rejected(reason="not now")
    done = lk.receive(respond(query.id, rejected=rejected))
    assert isinstance(done, ToolFinished) and done.result.is_error
    assert done.result.text == "The user declined the web search: not now"
    result = card_of(done).web_search_tool_call.result
    assert result.WhichOneof("result") == "rejected" and result.rejected.reason == "not now"


def test_a_failed_search_is_an_error_result_with_the_error_card() -> None:
    lk = link()
    _, query = start(lk, search_term="python 3.14 release")
    lk.receive(respond(query.id, **APPROVED))
    done = lk.deliver_job("op", JobFailed(message="search backend 'searx' answered HTTP 500"))
    assert isinstance(done, ToolFinished) and done.result.is_error
    assert done.result.text == "Error: search backend 'searx' answered HTTP 500"
    result = card_of(done).web_search_tool_call.result
    assert result.WhichOneof("result") == "error"
    assert result.error.error == done.result.text


def test_an_empty_response_is_an_error_and_a_missing_term_never_asks() -> None:
    lk = link()
    _, query = start(lk, search_term="python 3.14 release")
    done = lk.receive(respond(query.id))
    assert isinstance(done, ToolFinished) and done.result.is_error
    assert "neither an approval nor a rejection" in done.result.text

    call = ToolCall(id="toolu_2", name="WebSearch", arguments={"search_term": ""})
    started = link().start_tool("op2", call, llm_call_id="conv:1:llm1", content_index=0)
    assert started.early is not None and started.early.result.is_error
    assert "search_term" in started.early.result.text
    assert len(started.frames) == 1  # tool_call_started only: no query went out


def test_an_abort_while_the_search_runs_drops_its_outcome() -> None:
    call = ToolCall(id="toolu_1", name="WebSearch", arguments={"search_term": "q"})
    tool = machine_for(call, call_id="c-0", model_call_id="m", conversation_id="conv")
    ids = iter(range(1, 10))
    tool.start(lambda: next(ids), 1)
    assert isinstance(tool, QueryMachine)
    answer = a.InteractionResponse(
        id=1, web_search_request_response=a.WebSearchRequestResponse(**APPROVED)
    )
    assert isinstance(tool.answer(answer, 2), Send) and tool.phase is Phase.WORKING
    assert tool.abort() == ()  # a query has no abort message, the search has none either
    assert tool.phase is Phase.ABORTED
    late = tool.deliver(SearchResults(hits=HITS, backend="searx"), 3)
    assert isinstance(late, Ignored)


def test_search_text_is_deterministic() -> None:
    assert search_text("q", HITS) == search_text("q", HITS)
