"""Unary RPCs answered locally: server config, user, privacy mode, model catalogue, NameAgent.

Each entry maps a Connect path to its request type and a function building the response from
the models served (`RpcSettings`). Unknown paths are not here; the server answers them
`unimplemented`. `unary_handler` wraps an entry for the Connect app: bytes in, bytes out, in the
codec the client used (binary protobuf or the protobuf JSON mapping).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.message import (  # type: ignore[import-untyped,unused-ignore]
    DecodeError,
    Message,
)

from ... import __version__
from ...llm.models import Model
from .proto import agent_pb2, aiserver_pb2

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class RpcSettings:
    """What the unary RPCs answer from: the models served, in the configuration's order, the
    default (`default_model`'s id, else the first), and whether clients may use HTTP/2."""

    models: tuple[Model, ...] = ()
    http2: bool = True
    default_model: str | None = None


@dataclass(frozen=True, slots=True)
class UnaryContext:
    settings: RpcSettings
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class UnaryMethod:
    request_type: type[Message]
    handler: Callable[[Any, UnaryContext], Message]


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
    # agent_url_config stays unset so agent traffic stays on this origin.
    return aiserver_pb2.GetServerConfigResponse(
        config_version=f"cursor-byok-{__version__}", http2_config=http2
    )


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
                supports_images=m.vision,
                supports_max_mode=False,
                supports_non_max_mode=True,
                supports_plan_mode=True,
                context_token_limit=min(m.context_window, INT32_MAX),
                client_display_name=m.display_name,
                server_model_name=m.id,
                inputbox_short_model_name=m.display_name,
                is_user_added=False,
                id_aliases=m.aliases,
            )
            for m in models
        ],
    )
    if (default := _default(ctx.settings)) is not None:
        fm = aiserver_pb2.AvailableModelsResponse.FeatureModelConfig(
            default_model=default.id, fallback_models=[m.id for m in models if m is not default]
        )
        resp.composer_model_config.CopyFrom(fm)
        resp.quick_agent_model_config.CopyFrom(fm)
    return resp


def get_me(_req: aiserver_pb2.GetMeRequest, _ctx: UnaryContext) -> aiserver_pb2.GetMeResponse:
    return aiserver_pb2.GetMeResponse(
        auth_id="cursor-byok|local",
        user_id=1,
        email="local@cursor-byok.invalid",
        first_name="cursor-byok",
    )


def get_user_privacy_mode(
    _req: aiserver_pb2.GetUserPrivacyModeRequest, _ctx: UnaryContext
) -> aiserver_pb2.GetUserPrivacyModeResponse:
    return aiserver_pb2.GetUserPrivacyModeResponse(
        privacy_mode=aiserver_pb2.PRIVACY_MODE_NO_STORAGE,
        has_acknowledged_grace_period_disclaimer=True,
    )


def agent_title(text: str, *, max_words: int = 6, max_chars: int = 40) -> str:
    """A short chat title: the first non-empty line, at most `max_words` words and
    `max_chars` characters (cut at a word boundary when possible)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    words = line.split()[:max_words]
    title = " ".join(words)
    if len(title) > max_chars:
        cut = title[:max_chars]
        space = cut.rfind(" ")
        title = cut[:space] if space >= max_chars // 2 else cut
    return title.rstrip(" .,:;-") or "New chat"


def name_agent(req: agent_pb2.NameAgentRequest, _ctx: UnaryContext) -> agent_pb2.NameAgentResponse:
    return agent_pb2.NameAgentResponse(name=agent_title(req.user_message))


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
    "/aiserver.v1.DashboardService/GetMe": UnaryMethod(aiserver_pb2.GetMeRequest, get_me),
    "/aiserver.v1.DashboardService/GetUserPrivacyMode": UnaryMethod(
        aiserver_pb2.GetUserPrivacyModeRequest, get_user_privacy_mode
    ),
    "/agent.v1.AgentService/NameAgent": UnaryMethod(agent_pb2.NameAgentRequest, name_agent),
    "/agent.v1.AgentService/GetAllowedModelIntents": UnaryMethod(
        agent_pb2.GetAllowedModelIntentsRequest, get_allowed_model_intents
    ),
}


def parse_message(message: Message, raw: bytes, codec: Literal["proto", "json"]) -> Any:
    """`raw` into `message` (binary, or JSON with unknown fields ignored); ValueError when it
    does not decode."""
    try:
        if codec == "json":
            json_format.Parse(raw.decode("utf-8") or "{}", message, ignore_unknown_fields=True)
        else:
            message.ParseFromString(raw)
    except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
        name = message.DESCRIPTOR.full_name
        raise ValueError(f"cannot decode {name}: {exc}") from None
    return message


def encode_message(message: Message, codec: Literal["proto", "json"]) -> bytes:
    if codec == "json":
        return str(json_format.MessageToJson(message)).encode()
    return bytes(message.SerializeToString())


def unary_handler(
    method: UnaryMethod, settings: RpcSettings
) -> Callable[[bytes, Literal["proto", "json"], Mapping[str, str]], bytes]:
    def handle(raw: bytes, codec: Literal["proto", "json"], headers: Mapping[str, str]) -> bytes:
        request = parse_message(method.request_type(), raw, codec)
        return encode_message(method.handler(request, UnaryContext(settings, headers)), codec)

    return handle
