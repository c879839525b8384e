"""Issue 24 §5: custom subagents (`.cursor/agents/*.md`, sent as CustomSubagent in the run's
context) are Task types, and a helper of one runs with its own prompt, model and tools, end
to end over HTTP/2 (the real server process, the scripted brain upstream, our client as the
IDE, the child run opened as the IDE opens it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_queries import ide, tool_names
from tests.e2e.test_shim import chat_requests, content_text, exec_of, exec_reply
from tests.e2e.test_subagents import child_ide, child_request, parent_request, task_prompt
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

REVIEWER_PROMPT = "Review the diff for security problems only. Quote the risky lines."


def with_agents(message: a.AgentClientMessage) -> a.AgentClientMessage:
    """The run's context names two custom agents, as the IDE reads them from .cursor/agents."""
    context = message.run_request.action.user_message_action.request_context
    context.custom_subagents.add(
        full_path="/ws/.cursor/agents/reviewer.md",
        name="reviewer",
        description="Reviews code for security problems.",
        prompt=REVIEWER_PROMPT,
        model="composer-test",
        tools=["Read", "grep"],
    )
    context.custom_subagents.add(name="explore", description="shadows ours: left out")
    return message


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("custom-agents")
    with server_process(brain_config(upstream.base_url, db=work / "db"), work) as srv:
        yield srv


async def test_a_custom_agent_is_a_task_type_run_with_its_prompt_model_and_tools(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    marker = uuid.uuid4().hex[:8]
    child_prompt = f"[helper Reviewing] review the change #{marker}"
    prompt = task_prompt(child_prompt, subagent_type="reviewer")
    first_request = with_agents(parent_request(prompt))
    async with ide(server, "h2") as (send, reader):
        await send(first_request)
        sent = await reader.wait_for(exec_of("subagent_args"))
        args = sent.exec_server_message.subagent_args
        assert args.subagent_type == "reviewer"
        assert args.model_id == "composer-test"  # the agent file's model (served, listed)
        child_id = str(uuid.uuid4())
        async with child_ide(server, "h2", {}) as (child_send, child):
            await child_send(with_agents(child_request(args, child_id)))
            assert await child.wait_end(30) == {} and child.turn_ended
        success = a.SubagentSuccess(agent_id=child_id, final_message="ok", tool_call_count=1)
        await send(
            exec_reply(
                sent.exec_server_message.id, subagent_result=a.SubagentResult(success=success)
            )
        )
        assert await reader.wait_end(30) == {}
    # The parent's Task offers the custom type with its description (not the shadowing one).
    first = chat_requests(upstream, prompt)[0]
    task = next(t for t in first["tools"] if t["function"]["name"] == "Task")
    kind: dict[str, Any] = task["function"]["parameters"]["properties"]["subagent_type"]
    assert kind["enum"] == ["generalPurpose", "explore", "shell", "reviewer"]
    assert "reviewer: Reviews code for security problems." in kind["description"]
    # The helper's request: its own prompt, and only the tools its file lists (+ progress).
    child_first = next(
        body
        for body in chat_requests(upstream, child_prompt)
        if "You are a helper agent" in content_text(body["messages"][0]["content"])
    )
    assert tool_names(child_first) == ["Read", "Grep", "UpdateCurrentStep"]
    system = content_text(child_first["messages"][0]["content"])
    assert "You are the user's reviewer helper" in system and REVIEWER_PROMPT in system
    assert child_first["model"] == "brain-1"  # composer-test is brain-1 upstream


async def test_an_unknown_type_is_refused_naming_the_custom_ones(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    prompt = task_prompt("do it", subagent_type="nobody")
    async with ide(server, "h2") as (send, reader):
        await send(with_agents(parent_request(prompt)))
        assert await reader.wait_end(30) == {}
    _first, second = chat_requests(upstream, prompt)
    tool = next(m for m in second["messages"] if m["role"] == "tool")
    text = content_text(tool["content"])
    assert "no subagent_type 'nobody'" in text and "reviewer" in text
