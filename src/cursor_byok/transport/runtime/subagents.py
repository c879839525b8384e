"""Task's model choices, and where a child run sits among its parents (docs/subagents.md).

A Task call out on the client is remembered here (`Children.expect`) until the IDE opens the
child's run; the child is matched to it by the parent tool-call header (the shim), else by its
prompt (the child's first user message is the Task prompt, [U]), else by what the child's own
stored context says (a later turn or a `resume`). An unmatched child is placed at depth 1 with
no known parent, logged. Memory only: a matched child keeps its place in its stored context.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import msgspec

from ...llm.model_names import ModelNames, Resolved, Via
from ...llm.types import AssistantMessage, TextContent, ToolCall, ToolResultMessage, Usage
from ...loop import Helper, HelperReport, ParentCall
from ...loop.commands import CallClient
from ...loop.context import SubagentModel, SubagentOverride, TurnContext
from ...loop.state import Status
from ...store.api import Store, SubagentLink
from ..cursor import (
    BackgroundCompletions,
    BackgroundTaskKind,
    ChildRun,
    RunRequest,
    call_id_for,
    report_text,
    sanitize_tool_call_id,
)
from .committed_states import CommittedStates
from .conversation import Conversation

log = logging.getLogger("cursor_byok.runtime")

# Task calls waiting for their child run, at most: the oldest are dropped past it.
MAX_EXPECTED = 1024


def _served(names: ModelNames, name: str) -> str:
    """Our model id for a name the client sent, "" when we do not serve it (no fallback)."""
    found = names.resolve(name, use_default=False)
    if isinstance(found, Resolved) and found.via is not Via.DEFAULT:
        return found.model.id
    return ""


def model_choices(
    request: RunRequest, names: ModelNames
) -> tuple[tuple[SubagentModel, ...], tuple[SubagentOverride, ...]]:
    """The client's Task models that we serve, in its order (duplicates once), and its pins."""
    models: list[SubagentModel] = []
    seen: set[str] = set()
    for name in request.subagent_models:
        model = _served(names, name)
        if model and name not in seen:
            seen.add(name)
            models.append(SubagentModel(name=name, model=model))
    overrides: list[SubagentOverride] = []
    for subagent_type, name, inherit, disabled in request.subagent_overrides:
        if disabled:
            overrides.append(SubagentOverride(subagent_type=subagent_type, disabled=True))
        elif inherit:
            overrides.append(SubagentOverride(subagent_type=subagent_type, inherit=True))
        elif name:
            served = _served(names, name)
            overrides.append(
                SubagentOverride(subagent_type=subagent_type, model=name)
                if served
                else SubagentOverride(subagent_type=subagent_type, unserved=name)
            )
    return tuple(models), tuple(overrides)


@dataclass(frozen=True, slots=True)
class Expected:
    """A Task call out on the client, whose child run has not opened yet."""

    parent_conversation_id: str
    parent_request_id: str
    tool_call_id: str
    prompt: str
    depth: int  # the parent's depth
    root_conversation_id: str
    card_call_id: str = ""  # the parent's Task card (its child's progress goes into it)
    model_call_id: str = ""


class Children:
    """The Task calls of this process waiting for their child run."""

    def __init__(self) -> None:
        self._expected: dict[str, Expected] = {}  # by the parent's tool-call id

    def expect(self, call: Expected) -> None:
        self._expected.pop(call.tool_call_id, None)
        self._expected[call.tool_call_id] = call
        while len(self._expected) > MAX_EXPECTED:
            self._expected.pop(next(iter(self._expected)))

    def forget(self, tool_call_id: str) -> None:
        self._expected.pop(tool_call_id, None)

    def match(self, child: ChildRun, user_text: str) -> Expected | None:
        if child.parent_tool_call_id:
            found = self._expected.pop(child.parent_tool_call_id, None)
            if found is not None:
                return found
        text = user_text.strip()
        for key, call in self._expected.items():
            if text and call.prompt.strip() == text:
                return self._expected.pop(key)
        return None


def link_of(
    expected: Expected, child_conversation_id: str, subagent_type: str, now_ms: int
) -> SubagentLink:
    return SubagentLink(
        parent_conversation_id=expected.parent_conversation_id,
        parent_tool_call_id=expected.tool_call_id,
        child_conversation_id=child_conversation_id,
        subagent_type=subagent_type,
        depth=expected.depth + 1,
        created_at_ms=now_ms,
    )


def helper_of(
    request: RunRequest, child: ChildRun | None, children: Children, max_depth: int
) -> tuple[Helper, Expected | None]:
    """What this process knows of where the run of `request` sits: whether it is a child run,
    and the Task call it was matched to (the loop places it: loop/subagents.py)."""
    if child is None:
        return Helper(max_depth=max_depth), None
    expected = children.match(child, request.user_text)
    if expected is None:
        log.info(
            "conversation %s: a child run not matched to a Task call of this process",
            request.conversation_id,
        )
        return Helper(child=True, subagent_type=child.subagent_type, max_depth=max_depth), None
    parent = ParentCall(
        parent_conversation_id=expected.parent_conversation_id,
        depth=expected.depth,
        root_conversation_id=expected.root_conversation_id,
    )
    helper = Helper(
        child=True, subagent_type=child.subagent_type, parent=parent, max_depth=max_depth
    )
    return helper, expected


def with_choices(context: TurnContext, request: RunRequest, names: ModelNames) -> TurnContext:
    """`context` with the Task model choices of `request` (the loop keeps them in its place)."""
    models, overrides = model_choices(request, names)
    subagents = msgspec.structs.replace(
        context.subagents, models=models, overrides=overrides, custom=context.subagents.custom
    )
    return msgspec.structs.replace(context, subagents=subagents)


def _final_text(messages: tuple[Any, ...]) -> str:
    """The last assistant message's text (a helper's report)."""
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            return message.text.strip()
    return ""


async def helper_reports(
    completions: BackgroundCompletions, store: Store, states: CommittedStates
) -> tuple[HelperReport, ...]:
    """The final message of each finished helper a background completion names that this
    server served, read from the helper's own conversation (the loop adds them to the
    notice)."""
    reports: list[HelperReport] = []
    for done in completions.completions:
        if done.kind is not BackgroundTaskKind.SUBAGENT or not done.finished:
            continue
        cid = done.subagent_id or done.task_id
        if not cid:
            continue
        conv = Conversation(cid, store, states)
        if not await conv.load():
            continue
        report = _final_text(conv.state.committed.messages)
        if report:
            reports.append(HelperReport(conversation_id=cid, text=report))
    return tuple(reports)


async def helper_result(
    store: Store, states: CommittedStates, conversation_id: str, call: ToolCall
) -> tuple[str, ToolResultMessage | None]:
    """For a Task call of `conversation_id`: the helper conversation linked to it ("" when none
    is) and, once that helper's turn is over, the call's result built from its final message
    (None while it runs)."""
    link = await store.find_subagent_link(conversation_id, sanitize_tool_call_id(call.id))
    if link is None:
        return "", None
    child = link.child_conversation_id
    conv = Conversation(child, store, states)
    if not await conv.load() or conv.state.committed.status is not Status.FINAL:
        return child, None
    report = _final_text(conv.state.committed.messages)
    result = ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=(TextContent(text=report_text(report, child)),),
    )
    return child, result


async def helper_totals(
    store: Store, conversation_id: str, calls: list[str]
) -> tuple[Usage, float]:
    """The tokens and cost of the helpers a turn's Task calls (`calls`, their tool-call ids)
    started: the LLM calls of each linked child conversation made since its link (a resumed
    helper's earlier turns belong to the call that started them)."""
    usage, cost = Usage(), 0.0
    for tool_call_id in calls:
        link = await store.find_subagent_link(conversation_id, tool_call_id)
        if link is None:
            continue
        for call in await store.list_conversation_llm_calls(link.child_conversation_id):
            if call.created_at_ms < link.created_at_ms:
                continue
            usage = usage + Usage(
                input=call.input_tokens or 0,
                output=call.output_tokens or 0,
                cache_read=call.cache_read_tokens or 0,
                cache_write=call.cache_write_tokens or 0,
                reasoning=call.reasoning_tokens or 0,
            )
            cost += call.cost_usd or 0.0
    return usage, cost


def expected_of(
    command: CallClient, context: TurnContext | None, conversation_id: str, request_id: str
) -> Expected:
    """What the child run of the Task call `command` is matched by, once it opens."""
    subagents = context.subagents if context is not None else None
    prompt = command.tool_call.arguments.get("prompt")
    return Expected(
        parent_conversation_id=conversation_id,
        parent_request_id=request_id,
        tool_call_id=sanitize_tool_call_id(command.tool_call.id),
        card_call_id=call_id_for(command.llm_call_id, command.content_index),
        model_call_id=command.llm_call_id,
        prompt=prompt if isinstance(prompt, str) else "",
        depth=subagents.depth if subagents is not None else 0,
        root_conversation_id=(
            subagents.root_conversation_id
            if subagents is not None and subagents.root_conversation_id
            else conversation_id
        ),
    )
