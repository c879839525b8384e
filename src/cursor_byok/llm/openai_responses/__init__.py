"""OpenAI Responses API adapter (`POST {base_url}/responses`, streamed, `store: false`).

`request.py` turns the history into input items, each by a function of that message alone, so
the bytes of an older item never change as the conversation grows; `stream.py` routes the
`response.*` events into a `MessageAssembler`; `OpenAIResponsesAdapter` here joins them.

Decisions (the wire leaves these open):
- Reasoning signature: the raw JSON text of the `response.output_item.done` reasoning item,
  byte for byte as received (sliced out with `msgspec.Raw`, not re-encoded). Replay embeds the
  same bytes (`msgspec.Raw`) into `input`, so what we send back is exactly what we were given.
  Only items carrying `encrypted_content` are replayed: with `store: false` an id-only item
  fails with "Item not found".
- Text signature: `{"v":1,"id":<message item id>,"phase"?:...}`; replay reuses id and phase.
  `msg_`/`fc_` item ids are replayed only together with the turn's reasoning items (OpenAI
  rejects an item whose reasoning item is missing); ids are optional on input items.
- Tool call id = `call_id|item id`. A tool result is sent as `function_call_output` (text, or
  input_text/input_image parts when it holds images); Responses has no error flag for it.
- Reasoning off (`settings.reasoning` false): no `reasoning`/`include` keys, system prompt as
  role `system`; `reasoning_budget` does not apply to this API (effort only).
- Reasoning summary parts are separated by "\\n\\n", emitted before the *next* part's first
  delta, so the streamed deltas join to exactly the final thinking text.
- Refusals: `response.refusal.delta` is streamed as text; a message that contains a refusal
  part turns the end of the response into an `error` carrying the refusal text.
- `response.incomplete` (and `completed` with status incomplete): `done` with reason `length`,
  except `content_filter`, which is an `error`.
- Output items run by the provider itself (web_search_call, image_generation_call,
  file_search_call, code_interpreter_call, mcp_*, tool_search_call, ...) are ignored: their
  effect reaches us through the message text. Items the *client* would have to execute
  (custom_tool_call, apply_patch_call, shell/computer calls) can only appear when tools we
  never declare were injected via `extra_body`; we cannot run or replay them, so a response
  containing one ends in an `error` naming it instead of a silently empty success.
"""

from __future__ import annotations

from .. import context_errors
from ..assembler import MessageAssembler
from ..events import ContextLimit, ErrorKind
from ..http import HttpAdapter
from ..prefix_memo import PrefixMemo
from ..settings import ModelSettings, ProviderSettings
from ..stream import PreparedRequest
from ..types import RequestMessages
from .request import (
    API,
    ENDPOINT,
    ResponsesHistory,
    encode_body,
    normalize_tool_call_id,
    tool_result_item,
)
from .stream import ResponsesDecoder

__all__ = [
    "API",
    "ENDPOINT",
    "OpenAIResponsesAdapter",
    "ResponsesDecoder",
    "normalize_tool_call_id",
    "tool_result_item",
]


class OpenAIResponsesAdapter(HttpAdapter):
    """`OpenAIResponsesAdapter(ProviderSettings(api="openai-responses", ...))`."""

    api = API

    def __init__(self, provider: ProviderSettings):
        super().__init__(provider)
        self.histories: PrefixMemo[ResponsesHistory] = PrefixMemo()

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        body = encode_body(request, settings, self.provider.name, self.histories)
        headers: list[tuple[str, str]] = [
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ]
        if settings.cache_key:
            headers.append(("session_id", settings.cache_key))
        headers.extend(sorted(settings.extra_headers.items()))
        return PreparedRequest(
            url=self.provider.base_url.rstrip("/") + ENDPOINT,
            body=body,
            model=settings.model,
            headers=tuple(headers),
        )

    def auth_headers(self) -> list[tuple[str, str]]:
        """Provider-level headers may carry credentials (e.g. an Azure `api-key`), so they are
        added at send time with the bearer token, never stored in a PreparedRequest."""
        headers = list(self.provider.headers.items())
        if self.provider.api_key:
            headers.append(("authorization", f"Bearer {self.provider.api_key}"))
        return headers

    def error_kind(self, status: int, body: bytes) -> ErrorKind | None:
        return context_errors.openai(status, body)

    def context_limit(self, body: bytes) -> ContextLimit | None:
        return context_errors.openai_limit(body)

    def new_decoder(self, assembler: MessageAssembler) -> ResponsesDecoder:
        return ResponsesDecoder(assembler, redact=self.redact)
