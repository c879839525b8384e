"""Task's model choices, and where a child run sits among its parents (docs/subagents.md).

A Task call out on the client is remembered here (`Children.expect`) until the IDE opens the
child's run; the child is matched to it by the parent tool-call header (the shim), else by its
prompt (the child's first user message is the Task prompt, [U]), else by what the child's own
stored context says (a later turn or a `resume`). An unmatched child is placed at depth 1 with
no known parent, logged. Memory only: a matched child keeps its place in its stored context.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

import msgspec

from ...llm.model_names import ModelNames, Resolved, Via
from ...llm.types import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ...loop.commands import CallClient
from ...loop.context import SubagentModel, SubagentOverride, Subagents, TurnContext
from ...loop.inputs import ToolOperation
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


def place(
    context: TurnContext,
    request: RunRequest,
    child: ChildRun | None,
    stored: TurnContext | None,
    children: Children,
    names: ModelNames,
    max_depth: int,
) -> tuple[TurnContext, Expected | None]:
    """`context` with its Subagents: the Task choices of this request, and this
    conversation's place (a new child's from its parent's call, a known one's as stored)."""
    models, overrides = model_choices(request, names)
    where = stored.subagents if stored is not None else Subagents()
    expected: Expected | None = None
    mode = "subagent" if where.depth > 0 else context.mode  # a known child stays one
    if child is not None:
        mode = "subagent"
        expected = children.match(child, request.user_text)
        if expected is not None:
            where = Subagents(
                depth=expected.depth + 1,
                subagent_type=child.subagent_type,
                parent_conversation_id=expected.parent_conversation_id,
                root_conversation_id=expected.root_conversation_id,
            )
        elif not where.parent_conversation_id:
            log.info(
                "conversation %s: a child run whose parent is not known here; placed at depth 1",
                request.conversation_id,
            )
            where = Subagents(depth=max(1, where.depth), subagent_type=child.subagent_type)
    subagents = msgspec.structs.replace(
        where, models=models, overrides=overrides, custom=context.subagents.custom
    )
    switches = msgspec.structs.replace(
        context.switches, subagent_depth_reached=True if subagents.depth >= max_depth else None
    )
    placed = msgspec.structs.replace(context, mode=mode, subagents=subagents, switches=switches)
    return placed, expected


def carried(context: TurnContext, stored: TurnContext | None) -> TurnContext:
    """A follow-up's context keeps the stored Subagents and depth gate (the custom agents its
    own context names)."""
    if stored is None:
        return context
    switches = msgspec.structs.replace(
        context.switches, subagent_depth_reached=stored.switches.subagent_depth_reached
    )
    subagents = msgspec.structs.replace(stored.subagents, custom=context.subagents.custom)
    return msgspec.structs.replace(context, subagents=subagents, switches=switches)


def _final_text(messages: tuple[Any, ...]) -> str:
    """The last assistant message's text (a helper's report)."""
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            return message.text.strip()
    return ""


async def with_reports(
    request: RunRequest, completions: BackgroundCompletions, store: Store, states: CommittedStates
) -> RunRequest:
    """A background completion's run request whose notice also carries, for each finished
    helper this server served, the helper's final message from its own conversation (the
    IDE's completion only names it)."""
    lines: list[str] = []
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
            lines.append(f"Final message of helper {cid}:\n{report}")
    if not lines or request.user_message is None:
        return request
    text = "\n\n".join([request.user_text, *lines])
    return dataclasses.replace(request, user_message=UserMessage.of_text(text), user_text=text)


# How often a resumed parent looks at its helper's conversation while waiting for its end.
RECOVERY_POLL_S = 0.25


async def recovered(
    op: ToolOperation,
    call: ToolCall,
    conversation_id: str,
    store: Store,
    states: CommittedStates,
    wait_s: float,
) -> ToolOperation:
    """A Task call sent before a restart (its answer from the IDE lost with the stream): the
    result built from the helper conversation linked to it, once that helper's turn is over
    (waiting at most `wait_s`). Any other operation, an unlinked call, or a helper that does
    not finish in time: `op` unchanged (the loop's exactly-once rule: outcome unknown)."""
    if not op.sent or op.result is not None or call.name != "Task":
        return op
    link = await store.find_subagent_link(conversation_id, sanitize_tool_call_id(call.id))
    if link is None:
        return op
    child = link.child_conversation_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        conv = Conversation(child, store, states)
        if await conv.load() and conv.state.committed.status is Status.FINAL:
            report = _final_text(conv.state.committed.messages)
            log.info(
                "conversation %s: the Task call %s gets the report of helper %s, read from "
                "its conversation",
                conversation_id,
                call.id,
                child,
            )
            result = ToolResultMessage(
                tool_call_id=call.id,
                tool_name=call.name,
                content=(TextContent(text=report_text(report, child)),),
            )
            return msgspec.structs.replace(op, result=result)
        if loop.time() >= deadline:
            return op
        await asyncio.sleep(RECOVERY_POLL_S)


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
