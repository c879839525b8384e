"""The tool phase: the calls of the assistant message, answered by the loop itself when it can,
else all sent to the client at once and answered in any order; their results join the history
in call order. A lost or timed-out call."""

from __future__ import annotations

from typing import assert_never

import msgspec

from cursor_byok.llm.types import AssistantMessage, Message, ToolCall, ToolResultMessage

from . import catalogue, ids, todos
from .commands import WAIT_INPUT, CallClient, CallClients, Command, Final
from .images import after_queue
from .inputs import LostCause, ModeSwitched, PlanCreated, ToolEffect, ToolLost, ToolResult
from .prompt import render_tools
from .results import loop_failure, synthetic_result, timed_out_result, unknown_outcome_result
from .state import (
    AwaitClient,
    ConversationState,
    PendingEffect,
    PlanMark,
    PlanRecord,
    RuntimeState,
    Status,
)
from .step import (
    Ignored,
    LocalResult,
    Transition,
    commit,
    content_index,
    context_of,
    ignore,
    settle,
    take_early,
    with_messages,
)
from .todos import TodoUpdate
from .tools import LOCAL_TOOL_NAMES, side_effects
from .tools_agent import TASK, UPDATE_CURRENT_STEP

_replace = msgspec.structs.replace


def _operation(waiting: AwaitClient, call: ToolCall) -> str:
    return ids.operation_id(waiting.call_id, call.id)


def _call_client(c: ConversationState, waiting: AwaitClient, call: ToolCall) -> CallClient:
    """The command that runs `call` on the client, saying what the runtime does around it: a
    Task call's child run is expected next; a progress card also goes to the parent's card."""
    return CallClient(
        operation_id=_operation(waiting, call),
        tool_call=call,
        llm_call_id=waiting.call_id,
        content_index=content_index(c.messages, call.id),
        spawns=call.name == TASK.name,  # the IDE answers it by opening a child run
        to_parent=call.name == UPDATE_CURRENT_STEP.name,
    )


def _sending(sends: list[CallClient]) -> Command:
    if not sends:
        return WAIT_INPUT
    return sends[0] if len(sends) == 1 else CallClients(calls=tuple(sends))


def advance(
    c: ConversationState, local: tuple[LocalResult, ...] = (), resend: tuple[str, ...] = ()
) -> Transition:
    """Answer what can be answered without the client and send every other call of the message
    to the client at once (those not sent yet, and `resend`); append the results in call order
    as far as every call before them is answered; all answered, call the LLM again."""
    waiting = c.waiting
    assert isinstance(waiting, AwaitClient)
    early = list(waiting.early)
    outstanding = list(waiting.unanswered())
    effects = list(waiting.effects)
    context = context_of(c)
    names = tuple(t.name for t in render_tools(context))
    refused = catalogue.refused(catalogue.mode_of(context.mode))
    added: list[Message] = []
    answered = list(local)
    sends: list[CallClient] = []
    todo_list = c.todos
    in_order = True  # every call before this one has its result in the history
    nxt = waiting.next
    for call in waiting.calls[waiting.next :]:
        op = _operation(waiting, call)
        result = take_early(early, call.id)
        if result is None and op not in outstanding:
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
        if result is None:  # the client's to answer
            if op not in outstanding:
                outstanding.append(op)
                sends.append(_call_client(c, waiting, call))
            elif op in resend:
                sends.append(_call_client(c, waiting, call))
            in_order = False
            continue
        if not in_order:
            early.append(result)  # held until every call before it is answered
            continue
        added.append(result)
        nxt += 1
        effect = next((e for e in effects if e.tool_call_id == call.id), None)
        if effect is not None:
            effects.remove(effect)
            if not result.is_error:
                c = _apply_effect(with_messages(c, *added), effect.effect)
                added = []
    waiting = c.waiting
    assert isinstance(waiting, AwaitClient)
    if nxt < len(waiting.calls):
        c2 = commit(
            with_messages(c, *added),
            todos=todo_list,
            status=Status.WAITING_CLIENT,
            waiting=_replace(
                waiting,
                next=nxt,
                operation_id=outstanding[0] if outstanding else "",
                outstanding=tuple(outstanding),
                early=tuple(early),
                effects=tuple(effects),
            ),
        )
        return settle(c2, (), _sending(sends), local=tuple(answered))
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
    c2 = _replace(with_messages(c, *added), waiting=None, todos=todo_list)
    return _replace(after_queue(c2), local_results=tuple(answered))


def _answered(waiting: AwaitClient, call: ToolCall, result: ToolResultMessage) -> AwaitClient:
    """`waiting` with the client's `result` for `call` in: held with the early results (advance
    appends it in call order), its operation no longer outstanding."""
    op = _operation(waiting, call)
    return _replace(
        waiting,
        early=(*waiting.early, result),
        outstanding=tuple(o for o in waiting.unanswered() if o != op),
        operation_id="",
    )


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
    if any(r.tool_call_id == result.tool_call_id for r in waiting.early):
        return ignore(state, Ignored.ALREADY_ANSWERED)
    if result.tool_name != call.name:  # the pairing is by id; keep the name the model used
        result = _replace(result, tool_name=call.name)
    answered = _answered(waiting, call, result)
    if input.effect is not None and not result.is_error:
        effect = PendingEffect(tool_call_id=call.id, effect=input.effect)
        answered = _replace(answered, effects=(*answered.effects, effect))
    return advance(_replace(c, waiting=answered))


def _apply_effect(c: ConversationState, effect: ToolEffect) -> ConversationState:
    """What an answered call changes besides the history (uncommitted).

    - A created plan is recorded (a later Build finds it) and the turn ends once every call of
      the message is answered: the user reviews the plan and presses Build (reference §3.1).
    - An approved mode switch changes the turn's mode at once: the next model call of this very
      turn is built with the new mode's prompt and tools (reference §3.3)."""
    waiting = c.waiting
    assert isinstance(waiting, AwaitClient)
    match effect:
        case PlanCreated(plan=plan, uri=uri, name=name, overview=overview, todos=todos):
            keep = c.plan.name if c.plan is not None and not name else name
            record = PlanRecord(text=plan, uri=uri, name=keep, overview=overview, todos=todos)
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
    """An outstanding operation will not be answered. A timed-out call, and a lost call that
    may have changed something, get an error result saying so (never run twice); a lost call
    without side effects is simply sent again. The other calls of the message go on."""
    c = state.committed
    waiting = c.waiting
    if c.status != Status.WAITING_CLIENT or not isinstance(waiting, AwaitClient):
        return ignore(state, Ignored.NOT_AWAITED)
    if input.operation_id not in waiting.unanswered():
        return ignore(state, Ignored.OTHER_OPERATION)
    call = next(k for k in waiting.calls if _operation(waiting, k) == input.operation_id)
    if input.cause == LostCause.TIMED_OUT:
        result = timed_out_result(call, input.waited_ms)
    elif side_effects(call.name):
        result = unknown_outcome_result(call)
    else:
        return Transition(state, (), _call_client(c, waiting, call))
    local = LocalResult(call, waiting.call_id, content_index(c.messages, call.id), result)
    return advance(_replace(c, waiting=_answered(waiting, call, result)), (local,))


def call_client(c: ConversationState, waiting: AwaitClient) -> Command:
    """Every outstanding operation sent again (a resumed run whose client has none of them)."""
    pending = set(waiting.unanswered())
    return _sending(
        [_call_client(c, waiting, k) for k in waiting.calls if _operation(waiting, k) in pending]
    )
