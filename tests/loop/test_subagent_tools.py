"""Task and UpdateCurrentStep in the loop's requests (docs/subagents.md): the model choices
are the client's served list, a child run gets our helper prompt and UpdateCurrentStep, and
ask mode refuses Task without calling the client."""

from __future__ import annotations

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import ToolResultMessage
from cursor_byok.loop import CallLLM, RuntimeState, TurnContext, transition
from cursor_byok.loop.catalogue import Switches
from cursor_byok.loop.context import SubagentModel, Subagents
from tests.loop.loop_helpers import start, stream, tool_call


def first_call(context: TurnContext) -> CallLLM:
    t = transition(RuntimeState.new("c"), start("hi", context))
    assert isinstance(t.command, CallLLM)
    return t.command


def test_tasks_model_choices_are_the_clients_served_models() -> None:
    subagents = Subagents(models=(SubagentModel(name="composer-2.5", model="composer-test"),))
    call = first_call(TurnContext(subagents=subagents))
    (task,) = [t for t in call.request.tools if t.name == "Task"]
    assert task.parameters["properties"]["model"]["enum"] == ["inherit", "composer-2.5"]
    assert task.parameters["required"] == ["description", "prompt"]
    assert "UpdateCurrentStep" not in [t.name for t in call.request.tools]
    assert "helper agent" not in call.request.system_prompt


def test_a_child_run_gets_the_helper_prompt_and_update_current_step() -> None:
    context = TurnContext(mode="subagent", subagents=Subagents(depth=1, subagent_type="shell"))
    call = first_call(context)
    names = [t.name for t in call.request.tools]
    assert "UpdateCurrentStep" in names and "AskQuestion" not in names and "Task" in names
    assert "You are a helper agent" in call.request.system_prompt
    assert "command-line work" in call.request.system_prompt
    assert "UpdateCurrentStep as you move" in call.request.system_prompt
    # The client may suppress the progress tool; at the max depth Task goes.
    quiet = TurnContext(
        mode="subagent",
        switches=Switches(suppress_subagent_progress_update_tool=True, subagent_depth_reached=True),
    )
    call = first_call(quiet)
    names = [t.name for t in call.request.tools]
    assert "UpdateCurrentStep" not in names and "Task" not in names
    assert "UpdateCurrentStep as you move" not in call.request.system_prompt


def test_ask_mode_refuses_task() -> None:
    s = transition(RuntimeState.new("c"), start("hi", TurnContext(mode="ask"))).state
    ts, _ = stream(
        s, FauxResponse.tool_calls([tool_call("a", "Task", description="d", prompt="p")])
    )
    answer = ts[-1].state.committed.messages[-1]
    assert isinstance(answer, ToolResultMessage) and answer.is_error
    assert answer.text.startswith("Error: Task is not allowed in ask mode")
