"""The parts of a run that its run request decides: the model it resolves to, the model and
summary calls to that model (and its summarizer), the token's admissions, the context window,
the checkpoints and the conversation, built together once the run request is read."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, assert_never

import msgspec

from ...llm.events import ResponseEvent
from ...llm.model_names import Resolved, Unknown, Via
from ...llm.models import Model
from ...loop import ContextWindow, Input
from ...store.api import LLMCallRecord
from ..connect.channel import RunChannel
from ..cursor import ClientLink, RunRequest, agent_title, bad_request_end
from .access import Admissions
from .calls import ModelCalls, cache_key
from .checkpoints import Checkpoints
from .commits import Commits
from .conversation import Conversation
from .ending import Reports, RunFailed
from .provider_windows import ProviderWindows
from .requests import ClientRequests
from .runner import Runner
from .services import RunnerServices
from .summaries import SummaryCalls, context_window
from .summary import RunSummary
from .tools import ToolCalls

log = logging.getLogger("cursor_byok.runtime")


@dataclass(frozen=True, slots=True)
class RunParts:
    """What a run works with once its run request named the model."""

    model: Model
    calls: ModelCalls
    summaries: SummaryCalls
    admissions: Admissions  # the token's answer for each model call
    window: ContextWindow  # the model's budget, for the loop's compaction decisions
    checkpoints: Checkpoints
    conv: Conversation
    commits: Commits
    windows: ProviderWindows  # the process's memory of provider-reported windows

    def budget(self) -> ContextWindow:
        """The model's budget with the window its provider reported since the run started
        (the process keeps it per model): what each new turn's context gets."""
        reported = self.windows.tokens(self.model.id)
        if reported == self.window.provider_tokens:
            return self.window
        return msgspec.structs.replace(self.window, provider_tokens=reported)

    def end_calls(self, reason: str, now_ms: int) -> list[LLMCallRecord]:
        """The records of the model and summary calls still going as the run ends."""
        return self.calls.end_all(reason, now_ms) + self.summaries.end_all(reason, now_ms)


def resolve_model(services: RunnerServices, model_id: str | None, request_id: str) -> Model:
    """The served model a run request names; a name not served falls back to the default
    (logged), an unknown one without a default ends the run as a bad request."""
    match services.model_names.resolve(model_id):
        case Unknown() as unknown:
            raise RunFailed(bad_request_end(unknown.message()))
        case Resolved(model=model, via=Via.DEFAULT) if model_id:
            log.info(
                "run %s: model %r is not served; using the default %s",
                request_id,
                model_id,
                model.id,
            )
            return model
        case Resolved(model=model):
            return model
        case never:
            assert_never(never)


def summarizer_of(services: RunnerServices, model: Model) -> Model:
    """The model that writes a run's summaries: its compaction_model, else itself."""
    if model.compaction_model is not None:
        other = services.models.get(model.compaction_model)
        if other is not None:
            return other
    return model


def equip(
    runner: Runner,
    request: RunRequest,
    *,
    token_id: str | None,
    person: str | None = None,
    channel: RunChannel,
    requests: ClientRequests,
    tools: ToolCalls,
    reports: Reports,
    on_event: Callable[[str, ResponseEvent], Awaitable[None]],
    deliver: Callable[[Input, str], Awaitable[None]],
    background: Callable[[Awaitable[Any], str], None],
) -> RunParts:
    """The parts of the run `request` starts, its calls carrying the token and the process's
    lease (leases.py); its conversation seen by `person` (the token's; None: the operator)."""
    services = runner.services
    cid = request.conversation_id
    model = resolve_model(services, request.model_id, channel.request_id)
    key = cache_key(cid)  # one hash of the conversation id for the run's calls and summaries
    calls = ModelCalls(
        model=model,
        llm=services.llm_for(model),
        store=services.store,
        bases=runner.request_bases,
        conversation_id=cid,
        on_event=on_event,
        token_id=token_id,
        models=services.models,
        llm_for=services.llm_for,
        owner=runner.replica,
        prompt_cache_key=key,
    )
    summarizer = summarizer_of(services, model)
    window = context_window(model, summarizer, services.provider_windows.tokens(model.id))
    summaries = SummaryCalls(
        summarizer=summarizer,
        llm=services.llm_for(summarizer),
        store=services.store,
        conversation_id=cid,
        summary_output=window.summary_output,
        deliver=deliver,
        token_id=token_id,
        owner=runner.replica,
        prompt_cache_key=key,
    )
    conv = Conversation(cid, services.store, runner.committed_states, person)
    admissions = Admissions(
        runner.token_limits,
        token_id,
        model=model,
        summarizer=summarizer,
        models=services.models,
    )
    checkpoints = Checkpoints(
        conversation_id=cid,
        store=services.store,
        states=runner.committed_states,
        requests=requests,
        channel=channel,
        background=background,
        window=model.context_window,
    )
    return RunParts(
        model=model,
        calls=calls,
        summaries=summaries,
        admissions=admissions,
        window=window,
        checkpoints=checkpoints,
        conv=conv,
        commits=Commits(
            request_id=channel.request_id,
            services=services,
            conv=conv,
            calls=calls,
            summaries=summaries,
            tools=tools,
            reports=reports,
            admissions=admissions,
            checkpoints=checkpoints,
        ),
        windows=services.provider_windows,
    )


def named(request: RunRequest, summary: RunSummary, link: ClientLink) -> None:
    """The run's summary (for logs and metrics) and its client link learn what the run request
    named: the conversation, the model asked for, a title. Before the model is resolved, so a
    run refused for its model (unknown, not allowed) is still reported with its conversation."""
    cid = request.conversation_id
    summary.conversation_id = link.conversation_id = cid
    summary.requested_model = request.model_id or ""
    if request.user_text.strip():
        summary.title = agent_title(request.user_text)


def described(model: Model, summary: RunSummary, link: ClientLink) -> None:
    """The run's summary and its client link learn the model serving the run."""
    # Whether a Read of an image attaches it (else it is described): the model's `vision`.
    link.vision = model.vision
    link.model_id = summary.model = model.id
    summary.provider = model.provider.name
