"""What a unary RPC answers from, and how it is decoded and encoded.

`RpcSettings` holds what the composition root hands the dialect: the models served, the
HTTP/2 choice, the repository path key and an `RpcBackend` for the answers that need the
store or a model (who a person is, a conversation's context meter, a chat's name). The
dialect never imports the store or the LLM adapters: it calls the backend.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.message import (  # type: ignore[import-untyped,unused-ignore]
    DecodeError,
    Message,
)

from ...llm.models import Model
from ...loop.meter import Meter
from ..connect.sessions import PRINCIPAL_HEADER


@dataclass(frozen=True, slots=True)
class Person:
    """Who a request is, as GetMe tells the client: the person token's name and id."""

    principal: str  # the token's id (tok_…): stable, never a secret
    name: str


class MeterRefused(Exception):
    """The conversation's meter is not this caller's to read (another person's calls)."""


class RpcBackend(Protocol):
    """The composition root's answers that need more than the configuration."""

    def person(self, principal: str) -> Person | None:
        """The person a principal is (None: unknown, e.g. a token revoked a moment ago)."""
        ...

    async def context_meter(self, conversation_id: str, principal: str | None) -> Meter | None:
        """The meter of the conversation's latest model call (None: no call measured yet).
        Raises MeterRefused when the caller is a person and the calls are someone else's."""
        ...

    async def chat_name(self, user_words: str, principal: str | None) -> str | None:
        """A model's name for a chat (None: no title model, or it failed or timed out; the
        text rule answers then)."""
        ...

    async def conversation_cloned(self, conversation_id: str, source_conversation_id: str) -> None:
        """The IDE cloned a conversation (NotifyConversationClone): noted in the store, its
        first run starts with the source's history (transport/runtime/forks.py)."""
        ...


@dataclass(frozen=True, slots=True)
class RpcSettings:
    """What the unary RPCs answer from: the models served, in the configuration's order, the
    default (`default_model`'s id, else the first), whether clients may use HTTP/2, the key
    the CLI derives repository path names from, and the backend."""

    models: tuple[Model, ...] = ()
    http2: bool = True
    default_model: str | None = None
    path_encryption_key: str | None = None
    backend: RpcBackend | None = None


@dataclass(frozen=True, slots=True)
class UnaryContext:
    settings: RpcSettings
    headers: Mapping[str, str]

    @property
    def principal(self) -> str | None:
        """The person token the request authenticated with (set by the Connect app only)."""
        return self.headers.get(PRINCIPAL_HEADER) or None


Handler = Callable[[Any, UnaryContext], "Message | Awaitable[Message]"]


@dataclass(frozen=True, slots=True)
class UnaryMethod:
    request_type: type[Message]
    handler: Handler
    # Analytics: the body is never decoded and the request leaves no trace (docs/rpcs.md).
    dropped: bool = False


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


__all__ = [
    "Handler",
    "MeterRefused",
    "Person",
    "RpcBackend",
    "RpcSettings",
    "UnaryContext",
    "UnaryMethod",
    "encode_message",
    "parse_message",
]
