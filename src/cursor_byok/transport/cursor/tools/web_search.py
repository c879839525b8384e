"""WebSearch (reference §2.14): the IDE's approval, then the server's own search.

The call asks with `web_search_request_query`; the IDE answers `web_search_request_response`
(approved or rejected). Approval is consent only: the search runs on the server (a
`WebSearchJob` through the configured backends) and its outcome completes the call with the
`web_search_tool_call` card, its references, and a numbered list the model reads as an
ordinary tool result.
"""

from __future__ import annotations

from ....web.types import JobFailed, JobOutcome, SearchHit, SearchResults, WebSearchJob
from ..proto import agent_pb2
from . import args as a
from .machine import Finished, Step
from .queries import QueryMachine

__all__ = ["WebSearchMachine", "search_text"]


def search_text(term: str, hits: tuple[SearchHit, ...]) -> str:
    """The results as the model reads them: one numbered `title — url` line per hit, its
    excerpt under it. Deterministic: it lands in later turns' cached prefix."""
    if not hits:
        return f"The web search for {term!r} found no results."
    lines = [f"Web search results for {term!r}:"]
    for n, hit in enumerate(hits, 1):
        lines.append(f"{n}. {hit.title or hit.url} — {hit.url}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)


class WebSearchMachine(QueryMachine):
    CARD = "web_search_tool_call"
    QUERY_FIELD = "web_search_request_query"
    RESPONSE_FIELD = "web_search_request_response"
    REQUIRED = ("search_term",)
    # The approval may wait on the user ([U] whether the IDE auto-approves): the question
    # deadline bounds the wait; the search itself is bounded by the job deadline.
    WAITS_ON_PERSON = True

    @property
    def term(self) -> str:
        return a.str_or_empty(self.args, "search_term").strip()

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is None and not self.term:
            return "Error: the WebSearch call needs a non-empty search_term. Call it again."
        return problem

    def _search_args(self) -> agent_pb2.WebSearchArgs:
        return agent_pb2.WebSearchArgs(search_term=self.term, tool_call_id=self.tool_call_id)

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.web_search_tool_call.args.CopyFrom(self._search_args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.web_search_tool_call.result.error.error = text

    def _query(self) -> agent_pb2.WebSearchRequestQuery:
        return agent_pb2.WebSearchRequestQuery(args=self._search_args())

    def _on_answer(self, response: agent_pb2.WebSearchRequestResponse, now_ms: int) -> Step:
        match response.WhichOneof("result"):
            case "approved":
                return self._run_job(WebSearchJob(query=self.term, model=self.settings.model))
            case "rejected":
                reason = response.rejected.reason or "no reason given"
                tc = self._card()
                tc.web_search_tool_call.result.rejected.reason = reason
                return self._finish(
                    f"The user declined the web search: {reason}", tc, now_ms, is_error=True
                )
            case _:
                return self._finish_error(
                    "Error: the client answered the WebSearch request with neither an "
                    "approval nor a rejection; nothing was searched.",
                    now_ms,
                )

    def _on_job_done(self, outcome: JobOutcome, now_ms: int) -> Finished:
        if isinstance(outcome, SearchResults):
            tc = self._card()
            success = tc.web_search_tool_call.result.success
            success.SetInParent()  # no hits is still a success: the card lists none
            for hit in outcome.hits:
                success.references.add(title=hit.title, url=hit.url, chunk=hit.snippet)
            return self._finish(search_text(self.term, outcome.hits), tc, now_ms)
        if isinstance(outcome, JobFailed):
            return self._finish_error(f"Error: {outcome.message}", now_ms)
        return self._finish_error(
            "Error: the server's web search gave an answer of the wrong kind.", now_ms
        )
