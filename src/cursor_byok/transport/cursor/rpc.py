"""Unary RPCs answered locally: server config, the person, privacy mode, the model catalogue,
and (rpc_answers.py) the team surface, analytics and the session RPCs.

Each entry maps a Connect path to its request type and a function building the response from
what the server holds (`RpcSettings`, rpc_base.py). Unknown paths are not here; the server
answers them `unimplemented` (docs/rpcs.md lists every RPC and why). `unary_handler` wraps an
entry for the Connect app: bytes in, bytes out, in the codec the client used (binary protobuf
or the protobuf JSON mapping).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

from ... import __version__
from ...llm.models import Model
from .model_params import parameter_definitions, variants
from .proto import agent_pb2, aiserver_pb2
from .rpc_answers import ANSWERS
from .rpc_base import (
    MeterRefused,
    Person,
    RpcBackend,
    RpcSettings,
    UnaryContext,
    UnaryMethod,
    encode_message,
    parse_message,
)
from .titles import agent_title

INT32_MAX = 2**31 - 1


def model_details(model: Model) -> agent_pb2.ModelDetails:
    details = agent_pb2.ModelDetails(
        model_id=model.id,
        display_model_id=model.id,
        display_name=model.display_name,
        display_name_short=model.display_name,
        aliases=model.aliases,
    )
    if model.settings.reasoning:
        details.thinking_details.SetInParent()
    return details


def _models(settings: RpcSettings) -> list[Model]:
    return list(settings.models)


def _default(settings: RpcSettings) -> Model | None:
    """The model `default_model` names, else the first one."""
    chosen = (m for m in settings.models if m.id == settings.default_model)
    return next(chosen, settings.models[0] if settings.models else None)


def get_server_config(
    _req: aiserver_pb2.GetServerConfigRequest, ctx: UnaryContext
) -> aiserver_pb2.GetServerConfigResponse:
    # http2 = true: leave the choice to the client (its default is HTTP/2, but a user who turned
    # HTTP/2 off keeps the shim); false: force every client onto RunSSE + BidiAppend.
    http2 = (
        aiserver_pb2.HTTP2_CONFIG_UNSPECIFIED
        if ctx.settings.http2
        else aiserver_pb2.HTTP2_CONFIG_FORCE_ALL_DISABLED
    )
    # agent_url_config stays unset so agent traffic stays on this origin. The path keys: the
    # CLI names a git workspace's files with keys derived from them and stops every file tool
    # there without one (docs/rpcs.md); one random key per server, kept in its database.
    response = aiserver_pb2.GetServerConfigResponse(
        config_version=f"cursor-byok-{__version__}", http2_config=http2
    )
    if key := ctx.settings.path_encryption_key:
        response.indexing_config.default_user_path_encryption_key = key
        response.indexing_config.default_team_path_encryption_key = key
    return response


def get_usable_models(
    _req: agent_pb2.GetUsableModelsRequest, ctx: UnaryContext
) -> agent_pb2.GetUsableModelsResponse:
    return agent_pb2.GetUsableModelsResponse(
        models=[model_details(m) for m in _models(ctx.settings)]
    )


def get_default_model_for_cli(
    _req: agent_pb2.GetDefaultModelForCliRequest, ctx: UnaryContext
) -> agent_pb2.GetDefaultModelForCliResponse:
    default = _default(ctx.settings)
    if default is None:
        return agent_pb2.GetDefaultModelForCliResponse()
    return agent_pb2.GetDefaultModelForCliResponse(model=model_details(default))


def available_models(
    _req: aiserver_pb2.AvailableModelsRequest, ctx: UnaryContext
) -> aiserver_pb2.AvailableModelsResponse:
    AM = aiserver_pb2.AvailableModelsResponse.AvailableModel
    models = _models(ctx.settings)
    resp = aiserver_pb2.AvailableModelsResponse(
        model_names=[m.id for m in models],
        models=[
            AM(
                name=m.id,
                default_on=True,
                supports_agent=True,
                supports_thinking=m.settings.reasoning,
                supports_images=m.takes_images,
                supports_max_mode=False,
                supports_non_max_mode=True,
                supports_plan_mode=True,
                context_token_limit=min(m.context_window, INT32_MAX),
                client_display_name=m.display_name,
                server_model_name=m.id,
                inputbox_short_model_name=m.display_name,
                is_user_added=False,
                id_aliases=m.aliases,
                parameter_definitions=parameter_definitions(m),
                variants=variants(m),
            )
            for m in models
        ],
        # [U] the IDE reads `parameter_definitions` only when the response says it uses them.
        use_model_parameters=any(m.efforts for m in models),
    )
    if (default := _default(ctx.settings)) is not None:
        fm = aiserver_pb2.AvailableModelsResponse.FeatureModelConfig(
            default_model=default.id, fallback_models=[m.id for m in models if m is not default]
        )
        resp.composer_model_config.CopyFrom(fm)
        resp.quick_agent_model_config.CopyFrom(fm)
    return resp


LOCAL_AUTH_ID = "cursor-byok|local"


def get_me(_req: aiserver_pb2.GetMeRequest, ctx: UnaryContext) -> aiserver_pb2.GetMeResponse:
    """The person behind the request's token (their token's name), else the server's own user
    (a loopback server without tokens, or the operator's `auth_token`)."""
    principal = ctx.principal
    backend = ctx.settings.backend
    person = backend.person(principal) if principal and backend is not None else None
    if person is None:
        return aiserver_pb2.GetMeResponse(
            auth_id=LOCAL_AUTH_ID,
            user_id=1,
            email="local@cursor-byok.invalid",
            first_name="cursor-byok",
        )
    return aiserver_pb2.GetMeResponse(
        auth_id=f"cursor-byok|{person.principal}",
        user_id=_user_id(person.principal),
        email=f"{person.name}@cursor-byok.invalid",
        first_name=person.name,
    )


def _user_id(principal: str) -> int:
    """A stable positive int32 per token id (GetMe's user_id; 1 is the local user)."""
    digits = principal.removeprefix("tok_")
    try:
        return 2 + int(digits, 16) % (INT32_MAX - 2)
    except ValueError:
        return 2 + sum(principal.encode()) % (INT32_MAX - 2)


def server_time(
    _req: aiserver_pb2.ServerTimeRequest, _ctx: UnaryContext
) -> aiserver_pb2.ServerTimeResponse:
    now_ms = time.time() * 1000
    return aiserver_pb2.ServerTimeResponse(receive_timestamp=now_ms, transmit_timestamp=now_ms)


def get_default_model(
    _req: aiserver_pb2.GetDefaultModelRequest, ctx: UnaryContext
) -> aiserver_pb2.GetDefaultModelResponse:
    default = _default(ctx.settings)
    if default is None:
        return aiserver_pb2.GetDefaultModelResponse()
    return aiserver_pb2.GetDefaultModelResponse(model=default.id, thinking_model=default.id)


def get_default_model_nudge_data(
    _req: aiserver_pb2.GetDefaultModelNudgeDataRequest, ctx: UnaryContext
) -> aiserver_pb2.GetDefaultModelNudgeDataResponse:
    # Never switch a person's model on a new chat: every served model keeps its place.
    return aiserver_pb2.GetDefaultModelNudgeDataResponse(
        models_with_no_default_switch=[m.id for m in ctx.settings.models]
    )


def get_user_privacy_mode(
    _req: aiserver_pb2.GetUserPrivacyModeRequest, _ctx: UnaryContext
) -> aiserver_pb2.GetUserPrivacyModeResponse:
    return aiserver_pb2.GetUserPrivacyModeResponse(
        privacy_mode=aiserver_pb2.PRIVACY_MODE_NO_STORAGE,
        has_acknowledged_grace_period_disclaimer=True,
    )


def get_allowed_model_intents(
    _req: agent_pb2.GetAllowedModelIntentsRequest, _ctx: UnaryContext
) -> agent_pb2.GetAllowedModelIntentsResponse:
    return agent_pb2.GetAllowedModelIntentsResponse()


UNARY_METHODS: dict[str, UnaryMethod] = {
    "/aiserver.v1.ServerConfigService/GetServerConfig": UnaryMethod(
        aiserver_pb2.GetServerConfigRequest, get_server_config
    ),
    "/aiserver.v1.AiService/GetServerConfig": UnaryMethod(
        aiserver_pb2.GetServerConfigRequest, get_server_config
    ),
    "/agent.v1.AgentService/GetUsableModels": UnaryMethod(
        agent_pb2.GetUsableModelsRequest, get_usable_models
    ),
    "/aiserver.v1.AiService/GetUsableModels": UnaryMethod(
        agent_pb2.GetUsableModelsRequest, get_usable_models
    ),
    "/agent.v1.AgentService/GetDefaultModelForCli": UnaryMethod(
        agent_pb2.GetDefaultModelForCliRequest, get_default_model_for_cli
    ),
    "/aiserver.v1.AiService/GetDefaultModelForCli": UnaryMethod(
        agent_pb2.GetDefaultModelForCliRequest, get_default_model_for_cli
    ),
    "/aiserver.v1.AiService/AvailableModels": UnaryMethod(
        aiserver_pb2.AvailableModelsRequest, available_models
    ),
    "/aiserver.v1.AiService/ServerTime": UnaryMethod(aiserver_pb2.ServerTimeRequest, server_time),
    "/aiserver.v1.AiService/GetDefaultModel": UnaryMethod(
        aiserver_pb2.GetDefaultModelRequest, get_default_model
    ),
    "/aiserver.v1.AiService/GetDefaultModelNudgeData": UnaryMethod(
        aiserver_pb2.GetDefaultModelNudgeDataRequest, get_default_model_nudge_data
    ),
    "/aiserver.v1.DashboardService/GetMe": UnaryMethod(aiserver_pb2.GetMeRequest, get_me),
    "/aiserver.v1.DashboardService/GetUserPrivacyMode": UnaryMethod(
        aiserver_pb2.GetUserPrivacyModeRequest, get_user_privacy_mode
    ),
    "/agent.v1.AgentService/GetAllowedModelIntents": UnaryMethod(
        agent_pb2.GetAllowedModelIntentsRequest, get_allowed_model_intents
    ),
}


UNARY_METHODS.update(ANSWERS)

UnaryHandler = Callable[[bytes, Literal["proto", "json"], Mapping[str, str]], Awaitable[bytes]]


def unary_handler(method: UnaryMethod, settings: RpcSettings) -> UnaryHandler:
    async def handle(
        raw: bytes, codec: Literal["proto", "json"], headers: Mapping[str, str]
    ) -> bytes:
        # A dropped RPC's body is never decoded: what it carries is never looked at.
        request = method.request_type() if method.dropped else None
        if request is None:
            request = parse_message(method.request_type(), raw, codec)
        response = method.handler(request, UnaryContext(settings, headers))
        if inspect.isawaitable(response):
            response = await response
        return encode_message(response, codec)

    return handle


__all__ = [
    "INT32_MAX",
    "UNARY_METHODS",
    "MeterRefused",
    "Person",
    "RpcBackend",
    "RpcSettings",
    "UnaryContext",
    "UnaryMethod",
    "agent_title",
    "encode_message",
    "model_details",
    "parse_message",
    "unary_handler",
]
