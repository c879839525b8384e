"""Issue 24 §5: custom subagents decoded from the subagents part blob and the inline context,
bounded and merged; the tool list a helper of one gets (loop/custom_agents.py)."""

from __future__ import annotations

from cursor_byok.loop.catalogue import Mode, offered
from cursor_byok.loop.context import CustomAgent
from cursor_byok.loop.custom_agents import allowed_tools
from cursor_byok.transport.cursor.context import (
    PartKind,
    decode_request_context,
    merge_context,
)
from cursor_byok.transport.cursor.context_parts import decode_request_context_part
from cursor_byok.transport.cursor.proto import agent_pb2


def test_the_subagents_part_and_the_inline_context_give_the_agents_first_name_wins() -> None:
    part = agent_pb2.RequestContextSubagentsPart()
    part.custom_subagents.add(name="reviewer", description="from the part", tools=["Read"])
    part.custom_subagents.add(name="bad name!", description="not an identifier")
    part.custom_subagents.add(name="Shell", description="one of ours")
    part.custom_subagents.add(name="writer", prompt="x" * 30_000, model="inherit")
    decoded = decode_request_context_part(PartKind.SUBAGENTS, part.SerializeToString())
    assert [a.name for a in decoded.custom_agents] == ["reviewer", "writer"]
    assert len(decoded.custom_agents[1].prompt) == 20_000
    inline = agent_pb2.RequestContext()
    inline.custom_subagents.add(name="reviewer", description="inline, later")
    inline.custom_subagents.add(name="tester", description="inline only")
    context = merge_context(decode_request_context(inline), [decoded], [], mode="agent")
    agents = context.subagents.custom
    assert [(a.name, a.description) for a in agents] == [
        ("reviewer", "from the part"),
        ("writer", ""),
        ("tester", "inline only"),
    ]


def test_a_helpers_tools_are_its_list_matched_by_name_or_alias() -> None:
    tools = offered(Mode.SUBAGENT)
    agent = CustomAgent(name="r", tools=("read", "Bash", "edit", "no-such-tool"))
    assert allowed_tools(agent, tools) == ("Shell", "Read", "StrReplace", "UpdateCurrentStep")
    assert allowed_tools(CustomAgent(name="r", tools=("nothing",)), tools) == tools
    assert allowed_tools(CustomAgent(name="r"), tools) == tools
