"""kill -9 of the REAL server process around a pasted image's description (issue 24 §6,
`vision_model`): killed while the vision model describes, the restarted server sends the
describing call again from its stored bytes and the turn ends with one description; killed
after the description was committed (during the turn's own call), nothing is described again."""

from __future__ import annotations

import pytest

from cursor_byok.llm.types import AssistantMessage, UserMessage
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_crash_recovery import (
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
from tests.e2e.test_vision_model import SEEN, TEXT_MODEL, models, upstream_bodies
from tests.support.brain import answer
from tests.support.images import PNG
from tests.support.upstream import FakeUpstream

__all__ = ["crashable", "upstream"]  # the fixtures, used by name


def pasted(conversation: str, text: str) -> a.AgentClientMessage:
    message = user_run_request(conversation, text)
    message.run_request.requested_model.model_id = TEXT_MODEL
    um = message.run_request.action.user_message_action.user_message
    um.selected_context.selected_images.add(data=PNG, mime_type="image/png")
    return message


def resumed(conversation: str) -> a.AgentClientMessage:
    message = resume_run_request(conversation)
    message.run_request.requested_model.model_id = TEXT_MODEL
    return message


async def crash_while(
    crashable: Crashable,
    upstream: FakeUpstream,
    conversation: str,
    text: str,
    model: str,
    status: str,
) -> ShimRun:
    """Start the turn, wait for the call to `model` to hang, check the stored status, kill."""
    async with shim_http(crashable.url) as http:
        run = ShimRun(http, f"req-{conversation}", ScriptedClient())
        try:
            await run.open(pasted(conversation, text))
            await poll(lambda: len(upstream_bodies(upstream, model, text)) == 1, model)
            state = db_state(crashable.db, conversation)
            assert state is not None and state["status"] == status, state
            crashable.kill9()
            await run.finish()
        finally:
            await run.close()
    assert not run.result.turn_ended
    return run


@pytest.mark.parametrize("comeback", ["reopen_runsse", "resume_action"])
async def test_kill9_while_describing_sends_the_description_call_again_once(
    crashable: Crashable, upstream: FakeUpstream, comeback: str
) -> None:
    conversation = f"conv-vision-{comeback}"
    text = f"what is on this screenshot? {conversation}"
    crashable.models = models(upstream)
    crashable.start()
    upstream.push(partial_then_hang("HALF-A-DESCRIPTION " * 3))
    run1 = await crash_while(crashable, upstream, conversation, text, "brain-eye", "WaitingLLM")
    state = db_state(crashable.db, conversation)
    assert state is not None and "describing" in state["waiting"], state
    assert db_messages(crashable.db, conversation) == []  # the message waits for it
    assert [c[2] for c in db_calls(crashable.db, conversation)] == ["planned"]

    crashable.start()
    if comeback == "reopen_runsse":
        await complete_turn_logged(crashable, run1.request_id, None, seqno=run1.seqno)
    else:
        await complete_turn_logged(crashable, f"req-{conversation}-2", resumed(conversation))
    sent = upstream_bodies(upstream, "brain-eye", text)
    assert len(sent) == 2 and sent[1] == sent[0], "the describing call was not resent as it was"
    messages = decoded(db_messages(crashable.db, conversation))
    assert [type(m) for m in messages] == [UserMessage, AssistantMessage]
    assert SEEN in messages[0].text and "HALF-A-DESCRIPTION" not in messages[0].text
    calls = db_calls(crashable.db, conversation)
    assert [(c[0].rsplit(":", 1)[1], c[2]) for c in calls] == [
        ("vision1", "committed"),
        ("llm2", "committed"),
    ], calls


async def test_kill9_after_the_description_never_describes_again(
    crashable: Crashable, upstream: FakeUpstream
) -> None:
    conversation = "conv-vision-after"
    text = f"and this one? {conversation}"
    crashable.models = models(upstream)
    crashable.start()
    upstream.push(answer, partial_then_hang("HALF-AN-ANSWER " * 3))
    await crash_while(crashable, upstream, conversation, text, "brain-1", "WaitingLLM")
    stored = decoded(db_messages(crashable.db, conversation))
    assert len(stored) == 1 and SEEN in stored[0].text  # committed with the turn's call

    crashable.start()
    await complete_turn_logged(crashable, f"req-{conversation}-2", resumed(conversation))
    assert len(upstream_bodies(upstream, "brain-eye", text)) == 1  # never described again
    main = upstream_bodies(upstream, "brain-1", text)
    assert len(main) == 2 and main[1] == main[0]
    messages = decoded(db_messages(crashable.db, conversation))
    assert messages[0] == stored[0] and len(messages) == 2
