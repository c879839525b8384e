"""Where a child run sits: the runtime matches it to the Task call that started it
(transport/runtime/subagents.py `helper_of`) and the loop places it (loop/subagents.py
`placed`): one level deeper, and at server.subagent_max_depth without Task."""

from __future__ import annotations

from cursor_byok.llm.model_names import ModelNames
from cursor_byok.loop import Helper, ParentCall
from cursor_byok.loop.catalogue import Mode, offered
from cursor_byok.loop.context import TurnContext
from cursor_byok.loop.subagents import placed
from cursor_byok.transport.cursor import RunAction, RunRequest
from cursor_byok.transport.cursor.children import ChildRun
from cursor_byok.transport.runtime.subagents import Children, Expected, helper_of, with_choices
from tests.runtime.harness import MODEL


def names() -> ModelNames:
    return ModelNames([MODEL])  # the harness's one model, "faux"


def request(text: str, conversation_id: str) -> RunRequest:
    return RunRequest(
        conversation_id=conversation_id,
        model_id="faux",
        action=RunAction.USER_MESSAGE,
        user_message=None,
        mode="agent",
        inline_context=None,
        user_text=text,
        subagent_models=("faux", "gpt-9"),
    )


def place(
    context: TurnContext,
    request: RunRequest,
    child: ChildRun,
    stored: TurnContext | None,
    children: Children,
    names: ModelNames,
    max_depth: int,
) -> tuple[TurnContext, Expected | None]:
    """What a run's Start carries, then where the loop places it."""
    helper, matched = helper_of(request, child, children, max_depth)
    return placed(with_choices(context, request, names), stored, helper), matched


def test_the_runtime_reports_the_matched_call_as_facts() -> None:
    children = Children()
    children.expect(
        Expected(
            parent_conversation_id="parent",
            parent_request_id="r1",
            tool_call_id="call_1",
            prompt="look",
            depth=1,
            root_conversation_id="root",
        )
    )
    child = ChildRun(subagent_type="explore", parent_tool_call_id="call_1")
    helper, _ = helper_of(request("look", "child"), child, children, 2)
    assert helper == Helper(
        child=True,
        subagent_type="explore",
        parent=ParentCall(parent_conversation_id="parent", depth=1, root_conversation_id="root"),
        max_depth=2,
    )
    unmatched, none = helper_of(request("look", "child"), child, Children(), 3)
    assert (unmatched, none) == (Helper(child=True, subagent_type="explore", max_depth=3), None)


def test_a_child_one_level_below_its_parent_and_task_gone_at_the_max_depth() -> None:
    children = Children()
    children.expect(
        Expected(
            parent_conversation_id="parent",
            parent_request_id="r1",
            tool_call_id="call_1",
            prompt="look",
            depth=1,  # the parent is itself a helper
            root_conversation_id="root",
        )
    )
    context, matched = place(
        TurnContext(),
        request("look", "child"),
        ChildRun(subagent_type="explore", parent_tool_call_id="call_1"),
        None,
        children,
        names(),
        max_depth=2,
    )
    assert matched is not None and matched.parent_conversation_id == "parent"
    assert context.mode == "subagent"
    assert context.subagents.depth == 2
    assert context.subagents.root_conversation_id == "root"
    assert [m.name for m in context.subagents.models] == ["faux"]  # gpt-9 is not served
    assert "Task" not in offered(Mode.SUBAGENT, context.switches)

    # One level higher, Task is offered.
    shallow, _ = place(
        TurnContext(),
        request("other", "child2"),
        ChildRun(subagent_type="explore"),
        None,
        Children(),
        names(),
        max_depth=2,
    )
    assert shallow.subagents.depth == 1
    assert "Task" in offered(Mode.SUBAGENT, shallow.switches)
