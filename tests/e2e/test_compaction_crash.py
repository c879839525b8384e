"""kill -9 of the REAL server process while a compaction's summary call streams: after the
restart the summary call is sent again from its stored bytes, and the conversation ends with
exactly one summary and every message it had (nothing lost, nothing twice)."""

from __future__ import annotations

import json

import pytest

from cursor_byok.llm.types import UserMessage
from cursor_byok.loop import compaction
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_crash_recovery import (
    MODEL,
    Crashable,
    ScriptedClient,
    ShimRun,
    complete_turn_logged,
    crashable,
    db_calls,
    db_messages,
    db_state,
    decoded,
    partial_then_hang,
    poll,
    resume_run_request,
    shim_http,
    upstream,
    user_run_request,
)
from tests.support.brain import SUMMARY_REQUEST, summary_of
from tests.support.upstream import FakeUpstream

__all__ = ["crashable", "upstream"]  # the fixtures, used by name


def summarize_request(conversation_id: str) -> a.AgentClientMessage:
    req = a.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = MODEL
    req.action.summarize_action.SetInParent()
    return a.AgentClientMessage(run_request=req)


def summary_requests(upstream: FakeUpstream, conversation: str) -> list[bytes]:
    needle = json.dumps(SUMMARY_REQUEST)[1:-1].encode()
    return [
        r.body for r in upstream.requests if needle in r.body and conversation.encode() in r.body
    ]


@pytest.mark.parametrize("comeback", ["reopen_runsse", "resume_action"])
async def test_kill9_during_the_summary_call_resumes_it_exactly_once(
    crashable: Crashable, upstream: FakeUpstream, comeback: str
) -> None:
    conversation = f"conv-compact-{comeback}"
    crashable.start()
    for text in ("first question", "second question"):
        await complete_turn_logged(
            crashable,
            f"req-{comeback}-{text}",
            user_run_request(conversation, f"{text} {conversation}"),
        )
    before = decoded(db_messages(crashable.db, conversation))
    assert len(before) == 4

    upstream.push(partial_then_hang("SUMMARY-HALF-NEVER-COMMITTED " * 3))
    async with shim_http(crashable.url) as http:
        run1 = ShimRun(http, f"req-{comeback}-summarize", ScriptedClient())
        try:
            await run1.open(summarize_request(conversation))
            await poll(
                lambda: len(summary_requests(upstream, conversation)) == 1, "the summary call"
            )
            state = db_state(crashable.db, conversation)
            assert state is not None and state["status"] == "Summarizing", state
            calls = db_calls(crashable.db, conversation)
            assert [c[2] for c in calls if ":summary" in c[0]] == ["planned"], calls
            crashable.kill9()
            await run1.finish()
        finally:
            await run1.close()
    assert not run1.result.turn_ended

    crashable.start()
    if comeback == "reopen_runsse":
        run2 = await complete_turn_logged(crashable, run1.request_id, None, seqno=run1.seqno)
    else:
        run2 = await complete_turn_logged(
            crashable, f"req-{comeback}-resume", resume_run_request(conversation)
        )
    assert "interaction_update.summary" in run2.kinds, run2.describe()

    sent = summary_requests(upstream, conversation)
    assert len(sent) == 2 and sent[1] == sent[0], "the summary call was not resent as it was"

    messages = decoded(db_messages(crashable.db, conversation))
    summary = compaction.summary_message(summary_of("## User\n"))
    assert messages == [*before, summary]  # every message, and one summary
    assert sum(1 for m in messages if isinstance(m, UserMessage) and m == summary) == 1
    calls = db_calls(crashable.db, conversation)
    summaries = [c for c in calls if ":summary" in c[0]]
    assert [c[2] for c in summaries] == ["committed"], calls
    state = db_state(crashable.db, conversation)
    assert state is not None and state["status"] == "Final"
    assert len(state["compactions"]) == 1
