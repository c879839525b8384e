"""Google Gemini `streamGenerateContent?alt=sse` adapter (api id "gemini").

`request.py` turns the native history into `contents` and the rest of the body, `stream.py`
decodes the SSE chunks into native events (with `arguments.py` assembling streamed function-call
arguments), and `GeminiAdapter` here joins them for `HttpAdapter`.
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
from .arguments import ArgumentsWriter, assign_path, parse_json_path
from .request import (
    API,
    DEFAULT_BASE_URL,
    SKIP_SIGNATURE,
    GeminiHistory,
    build_body,
    build_contents,
    encode_body,
    generated_tool_call_id,
    is_valid_signature,
    normalize_tool_call_id,
    stream_url,
)
from .stream import GeminiDecoder, error_text

_decoder = msgspec.json.Decoder()


class GeminiAdapter(HttpAdapter):
    """Google Gemini over `streamGenerateContent?alt=sse`, authenticated by `x-goog-api-key`."""

    api = API

    def __init__(self, provider: ProviderSettings):
        super().__init__(provider)
        self.histories: PrefixMemo[GeminiHistory] = PrefixMemo()

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        body = encode_body(request, settings, self.provider.name, self.histories)
        headers = [("content-type", "application/json"), ("accept", "text/event-stream")]
        headers.extend(settings.extra_headers.items())
        return PreparedRequest(
            url=stream_url(self.provider.base_url, settings.model),
            body=body,
            model=settings.model,
            headers=tuple(headers),
        )

    def auth_headers(self) -> list[tuple[str, str]]:
        # Provider-level headers may hold proxy credentials, so they are added at send time too.
        headers = list(self.provider.headers.items())
        if self.provider.api_key:
            headers.append(("x-goog-api-key", self.provider.api_key))
        return headers

    def new_decoder(self, assembler: MessageAssembler) -> GeminiDecoder:
        return GeminiDecoder(assembler, redact=self.redact)

    def error_kind(self, status: int, body: bytes) -> ErrorKind | None:
        return context_errors.gemini(status, body)

    def context_limit(self, body: bytes) -> ContextLimit | None:
        return context_errors.gemini_limit(body)

    def error_message(self, status: int, body: bytes) -> str:
        try:
            data = _decoder.decode(body)
        except msgspec.DecodeError:
            return error_text_from_body(body)
        return error_text(data) or error_text_from_body(body)


__all__ = [
    "API",
    "DEFAULT_BASE_URL",
    "SKIP_SIGNATURE",
    "ArgumentsWriter",
    "GeminiAdapter",
    "GeminiDecoder",
    "assign_path",
    "build_body",
    "build_contents",
    "generated_tool_call_id",
    "is_valid_signature",
    "normalize_tool_call_id",
    "parse_json_path",
    "stream_url",
]
