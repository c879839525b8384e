"""The tool phase: the calls of the assistant message answered one at a time in content order,
by the loop itself when it can, else by the client; a lost or timed-out call."""

from __future__ import annotations

from typing import assert_never

import msgspec

from cursor_byok.llm.types import AssistantMessage, Message, ToolCall

from . import catalogue, ids, todos
from .commands import WAIT_INPUT, CallClient, Final
from .inputs import LostCause, ModeSwitched, PlanCreated, ToolEffect, ToolLost, ToolResult
from .model_calls import call_llm
from .prompt import render_tools
from .results import loop_failure, synthetic_result, timed_out_result, unknown_outcome_result
from .state import AwaitClient, ConversationState, PlanMark, PlanRecord, RuntimeState, Status
from .step import (
    Ignored,
    LocalResult,
    Transition,
    commit,
    content_index,
    context_of,
    flush_queue,
    ignore,
    settle,
    take_early,
    with_messages,
)
from .todos import TodoUpdate
from .tools import LOCAL_TOOL_NAMES, side_effects
from .tools_agent import TASK, UPDATE_CURRENT_STEP

_replace = msgspec.structs.replace


def advance(c: ConversationState, local: tuple[LocalResult, ...] = ()) -> Transition:
    """Answer what can be answered without the client, from `waiting.next` on, in call order;
    then either send the next call to the client or, all answered, call the LLM again."""
    waiting = c.waiting
    assert isinstance(waiting, AwaitClient)
    early = list(waiting.early)
    context = context_of(c)
    names = tuple(t.name for t in render_tools(context))
    refused = catalogue.refused(catalogue.mode_of(context.mode))
    added: list[Message] = []
    answered = list(local)
    todo_list = c.todos
    i = waiting.next
    while i < len(waiting.calls):
        call = waiting.calls[i]
        result = take_early(early, call.id)
        if result is None:
            result = synthetic_result(call, names, refused, context.mode)
            update: TodoUpdate | None = None
            if result is None and call.name == todos.TODO_WRITE:
                done = todos.write(todo_list, call)
                if isinstance(done, tuple):
                    update, result = done
                    todo_list = update.todos
                else:
                    result = done
            if result is not None:
                index = content_index(c.messages, call.id)
                answered.append(LocalResult(call, waiting.call_id, index, result, update))
        if result is None:
            op = ids.operation_id(waiting.call_id, call.id)
            c2 = commit(
                with_messages(c, *added),
                todos=todo_list,
                status=Status.WAITING_CLIENT,
                waiting=_replace(waiting, next=i, operation_id=op, early=tuple(early)),
            )
            command = client_call(op, call, waiting.call_id, content_index(c.messages, call.id))
            return settle(c2, (), command, local=tuple(answered))
        added.append(result)
        i += 1
    if waiting.ends_turn and not c.queued:
        # The turn ends here without another model call (CreatePlan); the answer it ends with
        # is the message that made the calls.
        last = next((m for m in reversed(c.messages) if isinstance(m, AssistantMessage)), None)
        answer = last if last is not None else loop_failure("")
        c2 = commit(
            with_messages(c, *added),
            status=Status.FINAL,
            waiting=None,
            queued_context=None,
            todos=todo_list,
        )
        return settle(c2, (), Final(message=answer), local=tuple(answered))
    c2 = _replace(flush_queue(with_messages(c, *added)), waiting=None, todos=todo_list)
    return _replace(call_llm(c2), local_results=tuple(answered))


def on_tool_result(state: RuntimeState, input: ToolResult) -> Transition:
    c = state.committed
    waiting = c.waiting
    if c.status != Status.WAITING_CLIENT or not isinstance(waiting, AwaitClient):
        return ignore(state, Ignored.NOT_AWAITED)
    result = input.message
    index = next(
        (k for k, call in enumerate(waiting.calls) if call.id == result.tool_call_id), None
    )
    if index is None:
        return ignore(state, Ignored.UNKNOWN_TOOL_CALL)
    if index < waiting.next:
        return ignore(state, Ignored.ALREADY_ANSWERED)
    call = waiting.calls[index]
    if call.name in LOCAL_TOOL_NAMES:  # the loop answers these; a client's answer is stray
        return ignore(state, Ignored.ANSWERED_BY_LOOP)
    if result.tool_name != call.name:  # the pairing is by id; keep the name the model used
        result = _replace(result, tool_name=call.name)
    if index > waiting.next:  # a later call answered first: keep it until its turn
        if any(r.tool_call_id == result.tool_call_id for r in waiting.early):
            return ignore(state, Ignored.ALREADY_ANSWERED)
        c2 = commit(c, waiting=_replace(waiting, early=(*waiting.early, result)))
        return Transition(RuntimeState(c2, state.pending_response), (), WAIT_INPUT)
    c2 = _replace(with_messages(c, result), waiting=_replace(waiting, next=index + 1))
    if input.effect is not None and not result.is_error:
        c2 = _apply_effect(c2, input.effect)
    return advance(c2)


def _apply_effect(c: ConversationState, effect: ToolEffect) -> ConversationState:
    """What an answered call changes besides the history (uncommitted).

    - A created plan is recorded (a later Build finds it) and the turn ends once every call of
      the message is answered: the user reviews the plan and presses Build (reference §3.1).
    - An approved mode switch changes the turn's mode at once: the next model call of this very
      turn is built with the new mode's prompt and tools (reference §3.3)."""
    waiting = c.waiting
    assert isinstance(waiting, AwaitClient)
    match effect:
        case PlanCreated(plan=plan, uri=uri, name=name, overview=overview):
            keep = c.plan.name if c.plan is not None and not name else name
            record = PlanRecord(text=plan, uri=uri, name=keep, overview=overview)
            mark = PlanMark(at=len(c.log) - 1, plan=record)  # the result is the log's last
            return _replace(
                c,
                plan=record,
                plans=(*c.plans, mark),
                waiting=_replace(waiting, ends_turn=True),
            )
        case ModeSwitched(mode=mode):
            context = context_of(c)
            if context.mode == mode:
                return c
            return _replace(c, context=_replace(context, mode=mode))
        case _:
            assert_never(effect)


def on_tool_lost(state: RuntimeState, input: ToolLost) -> Transition:
    """The awaited operation will not be answered. A timed-out call, and a lost call that may
    have changed something, get an error result saying so (never run twice); a lost call
    without side effects is simply sent again."""
    c = state.committed
    waiting = c.waiting
    if c.status != Status.WAITING_CLIENT or not isinstance(waiting, AwaitClient):
        return ignore(state, Ignored.NOT_AWAITED)
    if waiting.operation_id != input.operation_id:
        return ignore(state, Ignored.OTHER_OPERATION)
    call = waiting.calls[waiting.next]
    if input.cause == LostCause.TIMED_OUT:
        result = timed_out_result(call, input.waited_ms)
    elif side_effects(call.name):
        result = unknown_outcome_result(call)
    else:
        return Transition(state, (), call_client(c, waiting))
    local = LocalResult(call, waiting.call_id, content_index(c.messages, call.id), result)
    c2 = _replace(with_messages(c, result), waiting=_replace(waiting, next=waiting.next + 1))
    return advance(c2, (local,))


def call_client(c: ConversationState, waiting: AwaitClient) -> CallClient:
    call = waiting.calls[waiting.next]
    index = content_index(c.messages, call.id)
    return client_call(waiting.operation_id, call, waiting.call_id, index)


def client_call(
    operation_id: str, call: ToolCall, llm_call_id: str, content_index: int
) -> CallClient:
    """The command that runs `call` on the client, saying what the runtime does around it: a
    Task call's child run is expected next; a progress card also goes to the parent's card."""
    return CallClient(
        operation_id=operation_id,
        tool_call=call,
        llm_call_id=llm_call_id,
        content_index=content_index,
        spawns=call.name == TASK.name,  # the IDE answers it by opening a child run
        to_parent=call.name == UPDATE_CURRENT_STEP.name,
    )
