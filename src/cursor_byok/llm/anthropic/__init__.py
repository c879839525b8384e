"""Anthropic Messages adapter (api id "anthropic"): `POST {base}/v1/messages` with `stream: true`.

`request.py` builds the body (URL rule, message conversion, prompt-cache breakpoints, thinking),
`stream.py` decodes the SSE stream into native events; this module is the `HttpAdapter` that
joins them, with the key, the history memo and the provider's error bodies.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from .. import context_errors
from ..assembler import MessageAssembler
from ..events import ContextLimit, ErrorKind
from ..http import HttpAdapter, error_text_from_body
from ..prefix_memo import PrefixMemo, fold_history
from ..settings import ModelSettings, ProviderSettings
from ..stream import PreparedRequest
from ..transforms import Target
from ..types import RequestMessages
from .request import (
    ANTHROPIC_VERSION,
    DEFAULT_MAX_TOKENS,
    DEFAULT_THINKING_BUDGET,
    INTERLEAVED_THINKING_BETA,
    AnthropicHistory,
    encode_body,
    messages_url,
    provider_messages,
    request_headers,
)
from .stream import AnthropicDecoder

__all__ = [
    "ANTHROPIC_VERSION",
    "API",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_THINKING_BUDGET",
    "INTERLEAVED_THINKING_BETA",
    "AnthropicAdapter",
    "AnthropicDecoder",
    "messages_url",
    "provider_messages",
]

API = "anthropic"


class AnthropicAdapter(HttpAdapter):
    """`AnthropicAdapter(provider: ProviderSettings)`."""

    api: ClassVar[str] = API

    def __init__(self, provider: ProviderSettings):
        super().__init__(provider)
        self.histories: PrefixMemo[AnthropicHistory] = PrefixMemo()

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        target = Target(api=self.api, provider=self.provider.name, model=settings.model)
        history = fold_history(
            request.messages, target, lambda: AnthropicHistory(target), self.histories
        )
        return PreparedRequest(
            url=messages_url(self.provider.base_url),
            body=encode_body(request, settings, history),
            model=settings.model,
            headers=request_headers(settings),
        )

    def auth_headers(self) -> list[tuple[str, str]]:
        """The key, plus the provider's configured headers: those may hold gateway credentials,
        so they are never stored with a PreparedRequest either."""
        headers: list[tuple[str, str]] = []
        if self.provider.api_key:
            headers.append(("x-api-key", self.provider.api_key))
        headers.extend(sorted(self.provider.headers.items()))
        return headers

    def new_decoder(self, assembler: MessageAssembler) -> AnthropicDecoder:
        return AnthropicDecoder(assembler, self.redact)

    def error_kind(self, status: int, body: bytes) -> ErrorKind | None:
        return context_errors.anthropic(status, body)

    def context_limit(self, body: bytes) -> ContextLimit | None:
        return context_errors.anthropic_limit(body)

    def error_message(self, status: int, body: bytes) -> str:
        """`{"type":"error","error":{"type","message"},"request_id"}` -> "type: message (request
        id)"; the request id is what Anthropic support asks for."""
        text = error_text_from_body(body)
        try:
            data: Any = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return text
        request_id = data.get("request_id") if isinstance(data, dict) else None
        if isinstance(request_id, str) and request_id:
            text += f" (request_id {request_id})"
        return text
