"""The unary RPCs beyond the model catalogue: a person's team surface, analytics and the
session RPCs (docs/rpcs.md says why each answers what it does).

- Team, marketplace, skills, plugins, commands: the honest "none" (a self-hosted server has no
  Cursor team, marketplace or managed skills); the client then uses its local ones.
- Analytics: accepted and dropped. The body is not decoded, nothing is stored or logged.
- Session: NameAgent (a model's name or the text rule), UpdateConversationMetadata (the IDE
  keeps the name itself), GetPromptContextUsage (the latest call's meter), the nudges (none).
"""

from __future__ import annotations

from typing import Any

from ...loop.meter import Meter
from ..connect.envelopes import ConnectError
from .encode import token_details
from .proto import agent_pb2, aiserver_pb2
from .rpc_base import MeterRefused, UnaryContext, UnaryMethod
from .titles import agent_title, short_title, user_words

# PromptContextUsageTree.schema_version the client's own trees carry [S].
USAGE_TREE_SCHEMA = 1


def _empty(response_type: Any) -> Any:
    def answer(_req: Any, _ctx: UnaryContext) -> Any:
        return response_type()

    return answer


def _dropped(response: Any) -> Any:
    """An analytics answer: the same constant reply, whatever was sent."""

    def answer(_req: Any, _ctx: UnaryContext) -> Any:
        return response

    return answer


def team_repos(_req: aiserver_pb2.GetTeamReposRequest, _ctx: UnaryContext) -> Any:
    # No team: no team repositories, and no allowlist of local commands to enforce.
    return aiserver_pb2.GetTeamReposResponse()


def is_on_new_pricing(_req: aiserver_pb2.IsOnNewPricingRequest, _ctx: UnaryContext) -> Any:
    # Cursor's pricing plans do not apply: the person pays their own provider.
    return aiserver_pb2.IsOnNewPricingResponse()


async def name_agent(
    req: agent_pb2.NameAgentRequest, ctx: UnaryContext
) -> agent_pb2.NameAgentResponse:
    words = user_words(req.user_message)
    backend = ctx.settings.backend
    if words and backend is not None:
        named = await backend.chat_name(words, ctx.principal)
        if named and named.strip():
            return agent_pb2.NameAgentResponse(name=short_title(named.splitlines()[0]))
    return agent_pb2.NameAgentResponse(name=agent_title(req.user_message))


def update_conversation_metadata(
    _req: agent_pb2.UpdateConversationMetadataRequest, _ctx: UnaryContext
) -> agent_pb2.UpdateConversationMetadataResponse:
    # The client keeps a conversation's name and workspace paths itself; nothing here reads
    # them back, so there is nothing to store.
    return agent_pb2.UpdateConversationMetadataResponse()


def usage_tree(meter: Meter) -> agent_pb2.PromptContextUsageTree:
    """The context usage report: one node per meter category (the same numbers as the
    checkpoint's `token_details`), none of whose content the server keeps to show."""
    breakdown = token_details(meter).breakdown
    return agent_pb2.PromptContextUsageTree(
        schema_version=USAGE_TREE_SCHEMA,
        nodes=[
            agent_pb2.PromptContextNode(
                id=f"category:{c.id}",
                kind="category",
                label=c.label,
                category_id=c.id,
                estimated_tokens=c.estimated_tokens,
                character_count=c.character_count,
                content_available=False,
            )
            for c in breakdown.categories
        ],
    )


async def prompt_context_usage(
    req: agent_pb2.GetPromptContextUsageRequest, ctx: UnaryContext
) -> agent_pb2.GetPromptContextUsageResponse:
    if not req.conversation_id:
        raise ConnectError("invalid_argument", "conversation_id is missing")
    backend = ctx.settings.backend
    meter = None
    if backend is not None:
        try:
            meter = await backend.context_meter(req.conversation_id, ctx.principal)
        except MeterRefused:
            raise ConnectError(
                "permission_denied", "this conversation belongs to another person"
            ) from None
    snapshot = agent_pb2.PromptContextUsageSnapshot()
    if meter is not None:
        snapshot.prompt_context_usage_tree.CopyFrom(usage_tree(meter))
    return agent_pb2.GetPromptContextUsageResponse(snapshot=snapshot)


_D = "/aiserver.v1.DashboardService/"
_A = "/aiserver.v1.AnalyticsService/"
_G = "/agent.v1.AgentService/"
_STATSIG = aiserver_pb2.BootstrapStatsigResponse(config="{}")
_SUBMITTED = aiserver_pb2.SubmitLogsResponse(success=True)
_NO_WINDOW_EXPERIMENT = aiserver_pb2.GetFirstWindowStatsigDecisionResponse(reason="no statsig")


async def conversation_clone(
    req: agent_pb2.NotifyConversationCloneRequest, ctx: UnaryContext
) -> agent_pb2.NotifyConversationCloneResponse:
    """A chat forked in the IDE: noted in the store, so the clone's first run, on any process
    or replica, starts with the source's history (docs/dialect.md "Forks")."""
    backend = ctx.settings.backend
    if backend is not None:
        await backend.conversation_cloned(req.conversation_id, req.source_conversation_id)
    return agent_pb2.NotifyConversationCloneResponse()


def _drop(request_type: Any, response: Any) -> UnaryMethod:
    return UnaryMethod(request_type, _dropped(response), dropped=True)


ANSWERS: dict[str, UnaryMethod] = {
    # Team surface: not in a team.
    _D + "GetTeamAdminSettingsOrEmptyIfNotInTeam": UnaryMethod(
        aiserver_pb2.GetTeamAdminSettingsRequest, _empty(aiserver_pb2.GetTeamAdminSettingsResponse)
    ),
    _D + "GetTeamReposOrEmptyIfNotInTeam": UnaryMethod(
        aiserver_pb2.GetTeamReposRequest, team_repos
    ),
    _D + "GetTeams": UnaryMethod(
        aiserver_pb2.GetTeamsRequest, _empty(aiserver_pb2.GetTeamsResponse)
    ),
    _D + "GetTeamCommands": UnaryMethod(
        aiserver_pb2.GetTeamCommandsRequest, _empty(aiserver_pb2.GetTeamCommandsResponse)
    ),
    # No marketplace, managed skills, server-side plugins or global commands.
    _D + "ListMarketplaces": UnaryMethod(
        aiserver_pb2.ListMarketplacesRequest, _empty(aiserver_pb2.ListMarketplacesResponse)
    ),
    _D + "GetManagedSkills": UnaryMethod(
        aiserver_pb2.GetManagedSkillsRequest, _empty(aiserver_pb2.GetManagedSkillsResponse)
    ),
    _D + "GetEffectiveUserPlugins": UnaryMethod(
        aiserver_pb2.GetEffectiveUserPluginsRequest,
        _empty(aiserver_pb2.GetEffectiveUserPluginsResponse),
    ),
    _D + "GetGlobalCommands": UnaryMethod(
        aiserver_pb2.GetGlobalCommandsRequest, _empty(aiserver_pb2.GetGlobalCommandsResponse)
    ),
    _D + "IsOnNewPricing": UnaryMethod(aiserver_pb2.IsOnNewPricingRequest, is_on_new_pricing),
    # Analytics: accepted and dropped.
    _A + "TrackEvents": _drop(aiserver_pb2.TrackEventsRequest, aiserver_pb2.TrackEventsResponse()),
    _A + "Batch": _drop(aiserver_pb2.BatchRequest, aiserver_pb2.BatchResponse()),
    _A + "BootstrapStatsig": _drop(aiserver_pb2.BootstrapStatsigRequest, _STATSIG),
    _A + "GetFirstWindowStatsigDecision": _drop(
        aiserver_pb2.GetFirstWindowStatsigDecisionRequest, _NO_WINDOW_EXPERIMENT
    ),
    _A + "SubmitLogs": _drop(aiserver_pb2.SubmitLogsRequest, _SUBMITTED),
    _G + "UploadConversationBlobs": _drop(
        agent_pb2.UploadConversationBlobsRequest, agent_pb2.UploadConversationBlobsResponse()
    ),
    _G + "NotifyConversationClone": UnaryMethod(
        agent_pb2.NotifyConversationCloneRequest, conversation_clone
    ),
    # Session.
    _G + "NameAgent": UnaryMethod(agent_pb2.NameAgentRequest, name_agent),
    _G + "UpdateConversationMetadata": UnaryMethod(
        agent_pb2.UpdateConversationMetadataRequest, update_conversation_metadata
    ),
    _G + "GetPromptContextUsage": UnaryMethod(
        agent_pb2.GetPromptContextUsageRequest, prompt_context_usage
    ),
    _G + "GetNewChatNudgeLegacyModelPicker": UnaryMethod(
        agent_pb2.GetNewChatNudgeLegacyModelPickerRequest,
        _empty(agent_pb2.GetNewChatNudgeLegacyModelPickerResponse),
    ),
    _G + "GetNewChatNudgeParameterizedModelPicker": UnaryMethod(
        agent_pb2.GetNewChatNudgeParameterizedModelPickerRequest,
        _empty(agent_pb2.GetNewChatNudgeParameterizedModelPickerResponse),
    ),
}

__all__ = ["ANSWERS", "USAGE_TREE_SCHEMA", "name_agent", "prompt_context_usage", "usage_tree"]
