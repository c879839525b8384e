"""The loop input a turn starts with: the `Start` of a run request (its history for a new
conversation, its context parts, its turn context placed among the subagents) and the context
a follow-up brings mid-turn. Both carry the run's model budget and fallbacks, configuration the
loop reads to decide compaction and a fallback."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from ...llm.models import Model
from ...llm.types import UserMessage
from ...loop import ContextWindow, HelperReport, Start, TurnContext
from ..cursor import (
    BackgroundCompletions,
    ClientContext,
    ContextPart,
    McpDefinition,
    RunRequest,
    merge_context,
    recognise_child,
)
from .context import context_parts, turn_context, with_kept
from .forks import NewHistory, history_of_new, take_pre_fetched
from .requests import ClientRequests
from .run_parts import RunParts
from .runner import Runner
from .services import RunnerServices
from .subagents import Expected, helper_of, helper_reports, link_of, with_choices


@dataclass(frozen=True, slots=True)
class ModelTraits:
    """What the loop reads of the run's model besides its budget: whether it reads images
    and the model that describes them for it (loop/images.py), the efforts it offers and the
    one the run's picker asked for (loop/effort.py)."""

    images: bool | None = None
    effort: str = ""
    efforts: tuple[str, ...] = ()
    vision_model: str = ""
    fallback_images: tuple[bool, ...] = ()

    @classmethod
    def of(cls, model: Model, effort: str) -> ModelTraits:
        return cls(
            images=model.vision,
            effort=effort,
            efforts=model.efforts,
            vision_model=model.vision_model or "",
            fallback_images=model.fallback_vision,
        )


def with_budget(
    context: TurnContext,
    window: ContextWindow | None,
    fallbacks: tuple[str, ...],
    traits: ModelTraits | None = None,
) -> TurnContext:
    """The turn's context with the run's model budget, the model's fallbacks and traits."""
    if context.fallbacks != fallbacks:
        context = msgspec.structs.replace(context, fallbacks=fallbacks)
    if traits is not None and (
        context.images,
        context.effort,
        context.efforts,
        context.vision_model,
        context.fallback_images,
    ) != (
        traits.images,
        traits.effort,
        traits.efforts,
        traits.vision_model,
        traits.fallback_images,
    ):
        context = msgspec.structs.replace(
            context,
            images=traits.images,
            effort=traits.effort,
            efforts=traits.efforts,
            vision_model=traits.vision_model,
            fallback_images=traits.fallback_images,
        )
    if window is None or context.window == window:
        return context
    return msgspec.structs.replace(context, window=window)


@dataclass(frozen=True, slots=True)
class TurnStart:
    """A run request's Start, the context parts it read (a follow-up merges with them) and
    the parent's Task call when the run is a helper the parent's call was waiting for."""

    start: Start
    parts: tuple[ContextPart, ...]
    mcp_tools: tuple[McpDefinition, ...]
    parent_call: Expected | None


async def start_of(
    runner: Runner,
    request: RunRequest,
    *,
    requests: ClientRequests,
    stored: TurnContext | None,
    new_conversation: bool,
    headers: Mapping[str, str],
    request_id: str,
    equipped: RunParts,
    traits: ModelTraits | None = None,
) -> TurnStart:
    """The Start of `request`; a helper's run is linked to its parent's Task call here."""
    services = runner.services
    reports: tuple[HelperReport, ...] = ()
    window, fallbacks = equipped.budget(), equipped.model.fallbacks
    person = equipped.conv.viewer  # the run's person: their own blobs and forks only
    if isinstance(request.payload, BackgroundCompletions):
        reports = await helper_reports(request.payload, services.store, runner.committed_states)
    history = NewHistory()
    blobs = runner.client_blobs.scoped(person)  # what this person's runs fetched
    take_pre_fetched(request, blobs)  # what the client sent along is read without asking
    if new_conversation:  # what its client holds, or a fork of one of ours (forks.py)
        history = await history_of_new(
            request,
            services.store,
            requests,
            blobs,
            person,
            clone_source=equipped.conv.clone_source,
        )
    kept = stored.kept_parts if stored is not None else ()
    parts = await context_parts(request, requests, blobs, kept)
    context = await turn_context(
        request,
        parts,
        requests,
        services.disabled_tools,
        services.enabled_tools,
        services.web_search_configured,
        services.image_generation,
    )
    context = with_choices(context, request, services.model_names)
    child = recognise_child(request.child, headers, request_id)
    helper, parent_call = helper_of(request, child, runner.children, services.subagent_max_depth)
    if parent_call is not None and child is not None:
        link = link_of(parent_call, request.conversation_id, child.subagent_type, services.now_ms())
        await services.store.save_subagent_link(link)
    context = with_kept(context, parts, kept)  # the blobs later turns may need
    start = Start(
        # A Build has no user message: the loop opens its turn with the plan.
        user_message=request.user_message or UserMessage(content=()),
        context=with_budget(context, window, fallbacks, traits),
        history=history.messages,
        fork=history.fork,
        todos=request.history.todos if new_conversation else (),  # our own list wins
        build=request.build,
        helper=helper,
        reports=reports,
    )
    return TurnStart(start, parts, request.mcp_tools, parent_call)


def follow_up_context(
    services: RunnerServices,
    client: ClientContext,
    stored: TurnContext | None,
    started: TurnStart | None,
    window: ContextWindow | None,
    fallbacks: tuple[str, ...],
    traits: ModelTraits | None = None,
) -> TurnContext:
    """The context a follow-up brought, merged with the parts and MCP tools of the run request
    that `started` the turn; the stored turn's mode, instructions and subagent place carry on."""
    parts = started.parts if started is not None else ()
    merged = merge_context(
        client,
        parts,
        started.mcp_tools if started is not None else (),
        mode=stored.mode if stored is not None else "agent",
        custom_instructions=stored.custom_instructions if stored is not None else None,
        suppress_subagent_progress_update_tool=(
            stored.switches.suppress_subagent_progress_update_tool if stored is not None else None
        ),
        disabled_tools=services.disabled_tools,
        enabled_tools=services.enabled_tools,
        web_search_configured=services.web_search_configured,
        image_generation=services.image_generation,
    )
    kept = with_kept(merged, parts, stored.kept_parts if stored is not None else ())
    return with_budget(kept, window, fallbacks, traits)
