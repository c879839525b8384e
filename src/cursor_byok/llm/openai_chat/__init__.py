"""OpenAI Chat Completions adapter (api id "openai-chat"), also for OpenAI-compatible servers.

Three parts: `request.py` (request building, with the endpoint differences in `ChatCompat`),
`stream.py` (`ChatDecoder`: SSE chunks -> native events through the `MessageAssembler`) and
`OpenAIChatAdapter` here (glue for `HttpAdapter`).
"""

from __future__ import annotations

import msgspec

from .. import context_errors
from ..assembler import MessageAssembler
from ..events import ContextLimit, ErrorKind
from ..http import HttpAdapter, error_text_from_body
from ..prefix_memo import PrefixMemo
from ..settings import ModelSettings, ProviderSettings
from ..stream import PreparedRequest
from ..types import RequestMessages
from .request import (
    API,
    ChatCompat,
    ChatHistory,
    build_body,
    chat_url,
    convert_messages,
    detect_compat,
    encode_body,
    normalize_tool_call_id,
)
from .stream import ChatDecoder, _dict

__all__ = [
    "API",
    "ChatCompat",
    "ChatDecoder",
    "ChatHistory",
    "OpenAIChatAdapter",
    "build_body",
    "chat_url",
    "convert_messages",
    "detect_compat",
    "normalize_tool_call_id",
]

_encode = msgspec.json.encode
_decode = msgspec.json.decode


class OpenAIChatAdapter(HttpAdapter):
    """`OpenAIChatAdapter(provider, *, compat=None)`; compat defaults to
    `detect_compat(provider)`."""

    api = API

    def __init__(
        self,
        provider: ProviderSettings,
        *,
        compat: ChatCompat | None = None,
    ) -> None:
        super().__init__(provider)
        self.compat = compat if compat is not None else detect_compat(provider)
        self.histories: PrefixMemo[ChatHistory] = PrefixMemo()

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        body = encode_body(request, settings, self.provider.name, self.compat, self.histories)
        headers = [("content-type", "application/json"), ("accept", "text/event-stream")]
        headers += [(k, settings.extra_headers[k]) for k in sorted(settings.extra_headers)]
        return PreparedRequest(
            url=chat_url(self.provider.base_url),
            body=body,
            model=settings.model,
            headers=tuple(headers),
        )

    def auth_headers(self) -> list[tuple[str, str]]:
        """Provider headers and the key, added at send time only (they may hold secrets).
        No key (local servers) means no auth header."""
        out = list(self.provider.headers.items())
        key = self.provider.api_key
        if key:
            if self.compat.auth_header == "api-key":
                out.append(("api-key", key))
            else:
                out.append(("authorization", f"Bearer {key}"))
        return out

    def new_decoder(self, assembler: MessageAssembler) -> ChatDecoder:
        return ChatDecoder(assembler, self.redact)

    def error_kind(self, status: int, body: bytes) -> ErrorKind | None:
        return context_errors.openai(status, body)

    def context_limit(self, body: bytes) -> ContextLimit | None:
        return context_errors.openai_limit(body)

    def error_message(self, status: int, body: bytes) -> str:
        """OpenAI's `{"error": {...}}` body, plus OpenRouter's `error.metadata.raw`."""
        text = error_text_from_body(body)
        try:
            data = _decode(body)
        except msgspec.DecodeError:
            return text
        raw = _dict(_dict(_dict(data).get("error")).get("metadata")).get("raw")
        if raw:
            text += f" ({raw if isinstance(raw, str) else _encode(raw).decode()})"
        return text
