"""Subagents as loop rules (loop/subagents.py): the runtime reports what it saw of a run's
place (Start.helper) and the helpers' reports (Start.reports); the loop decides the mode, the
depth, whether Task is offered, what the parent's model reads, and which client calls start a
child run or show a card in the parent's Task card."""

from __future__ import annotations

import msgspec

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import UserMessage
from cursor_byok.loop import (
    CallClient,
    CallLLM,
    Helper,
    HelperReport,
    ParentCall,
    RuntimeState,
    Start,
    TurnContext,
    UserMessageInput,
    transition,
)
from cursor_byok.loop.catalogue import Switches
from cursor_byok.loop.context import SubagentModel, Subagents
from cursor_byok.loop.subagents import placed
from tests.loop.loop_helpers import stream, tool_call

CHOICES = Subagents(models=(SubagentModel(name="faux", model="faux"),))
PARENT = ParentCall(parent_conversation_id="parent", depth=1, root_conversation_id="root")


def test_a_matched_child_sits_one_below_its_parent_and_loses_task_at_the_max_depth() -> None:
    context = TurnContext(subagents=CHOICES)
    child = Helper(child=True, subagent_type="explore", parent=PARENT, max_depth=2)
    assert placed(context, None, child) == TurnContext(
        mode="subagent",
        subagents=Subagents(
            models=CHOICES.models,
            depth=2,
            subagent_type="explore",
            parent_conversation_id="parent",
            root_conversation_id="root",
        ),
        switches=Switches(subagent_depth_reached=True),
    )
    shallow = msgspec.structs.replace(child, max_depth=3)
    assert placed(context, None, shallow).switches == Switches()


def test_an_unmatched_child_sits_at_depth_1_and_a_known_one_keeps_its_place() -> None:
    context = TurnContext(subagents=CHOICES)
    unmatched = Helper(child=True, subagent_type="shell")
    assert placed(context, None, unmatched).subagents == Subagents(
        models=CHOICES.models, depth=1, subagent_type="shell"
    )
    stored = placed(context, None, Helper(child=True, subagent_type="x", parent=PARENT))
    # A later turn of that child (no child fields this time): still a helper, same place.
    later = placed(TurnContext(mode="agent"), stored, Helper(max_depth=2))
    assert (later.mode, later.subagents) == (
        "subagent",
        msgspec.structs.replace(stored.subagents, models=()),
    )
    # A top-level conversation stays in its mode, at depth 0, with Task.
    top = placed(TurnContext(mode="plan", subagents=CHOICES), None, Helper())
    assert top == TurnContext(mode="plan", subagents=CHOICES)


def test_the_start_is_placed_and_the_helpers_reports_join_the_notice() -> None:
    start = Start(
        user_message=UserMessage.of_text("A helper finished."),
        context=TurnContext(subagents=CHOICES),
        helper=Helper(child=True, subagent_type="explore", parent=PARENT, max_depth=2),
        reports=(
            HelperReport(conversation_id="h1", text="found it"),
            HelperReport(conversation_id="h2", text=""),
        ),
    )
    t = transition(RuntimeState.new("c"), start)
    assert isinstance(t.command, CallLLM)
    context = t.state.committed.context
    assert context is not None and context.subagents.depth == 2
    assert "Task" not in [tool.name for tool in t.command.request.tools]
    assert t.command.request.messages[-1] == UserMessage.of_text(
        "A helper finished.\n\nFinal message of helper h1:\nfound it"
    )


def test_a_follow_ups_context_keeps_the_turns_place() -> None:
    start = Start(
        user_message=UserMessage.of_text("go"),
        context=TurnContext(),
        helper=Helper(child=True, subagent_type="explore", parent=PARENT, max_depth=2),
    )
    ts, _ = stream(transition(RuntimeState.new("c"), start).state, FauxResponse.text("done"))
    follow = UserMessageInput(message=UserMessage.of_text("more"), context=TurnContext())
    t = transition(ts[-1].state, follow)
    context = t.state.committed.context
    assert context is not None
    assert (context.subagents.depth, context.switches.subagent_depth_reached) == (2, True)


def test_task_spawns_a_child_and_a_progress_card_goes_to_the_parent() -> None:
    s = transition(RuntimeState.new("c"), Start(user_message=UserMessage.of_text("hi"))).state
    ts, _ = stream(
        s, FauxResponse.tool_calls([tool_call("a", "Task", description="d", prompt="p")])
    )
    command = ts[-1].command
    assert isinstance(command, CallClient)
    assert (command.spawns, command.to_parent) == (True, False)
    ts, _ = stream(s, FauxResponse.tool_calls([tool_call("b", "Read", path="x")]))
    command = ts[-1].command
    assert isinstance(command, CallClient)
    assert (command.spawns, command.to_parent) == (False, False)
    helper = Start(
        user_message=UserMessage.of_text("hi"),
        helper=Helper(child=True, subagent_type="explore", parent=PARENT, max_depth=3),
    )
    s = transition(RuntimeState.new("c"), helper).state
    step = tool_call("c", "UpdateCurrentStep", current_step="reading")
    ts, _ = stream(s, FauxResponse.tool_calls([step]))
    command = ts[-1].command
    assert isinstance(command, CallClient)
    assert (command.spawns, command.to_parent) == (False, True)
