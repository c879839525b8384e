"""Anthropic Messages adapter (api id "anthropic"): `POST {base}/v1/messages` with `stream: true`.

URL rule: `base_url` is the server root (default `https://api.anthropic.com`); `/v1/messages` is
appended. A base that already ends in `/v1` gets only `/messages`, and one that already ends in
`/v1/messages` is used as is, so gateway URLs copied from other tools work unchanged.

Request. The body is built as a dict in a fixed key order and encoded once. History first goes
through `transform_messages` (foreign signatures dropped, foreign tool ids normalized to
`[A-Za-z0-9_-]{1,64}`); then every native message becomes one provider message through a function
of that message alone, except that consecutive tool results become ONE user message of
`tool_result` blocks (the API wants all results of one assistant turn together). That group is
byte-stable too: the loop appends every result of an assistant message before it makes the next
request, so a group is already complete the first time it is sent and never grows afterwards.

Prompt caching. `cache_control: {type: "ephemeral"}` marks (1) the system text block, (2) the last
tool and (3) the last content block of the last message: 3 of the 4 breakpoints the API allows.
System and tools are identical from one request to the next; the third breakpoint moves forward
every turn, so two consecutive requests of a tool loop differ by the appended messages plus that
one moved `cache_control` key (tests/llm/test_anthropic_request.py checks exactly this). Anthropic
reads the longest cached prefix up to a breakpoint, so the previous turn's prefix is a cache hit.

Thinking. `settings.reasoning` turns on `thinking: {type: "enabled", budget_tokens}` with the
`interleaved-thinking` beta; the budget is `reasoning_budget`, else derived from
`reasoning_effort`, else `DEFAULT_THINKING_BUDGET`, and `max_tokens` is raised above the budget
when needed (the API requires `max_tokens > budget_tokens`). Adaptive-thinking models
(`thinking: {type: "adaptive"}` + `output_config.effort`) are a later extension; until then
`settings.extra_body` can set both keys, as it overrides any body key.

Stream. Provider content indices are mapped to native ones. Server-side tool blocks
(`server_tool_use`, `web_search_tool_result`, `mcp_tool_use`, `mcp_tool_result`,
`*_code_execution_tool_result`, `compaction`, ...) are run by Anthropic, not by us: they are not
client ToolCalls and the native model has no block to keep them in, so they are skipped; the
text around them is kept. Citations are dropped (the cited text itself is in the text deltas).
`redacted_thinking` becomes a thinking block with empty text, `redacted=True` and the `data` blob
as its signature, replayed as `{type: redacted_thinking, data}` to the same model only.
Usage is cumulative (each report replaces the fields it carries); Anthropic reports no separate
reasoning-token count, so `Usage.reasoning` stays 0. `stop_reason` refusal/sensitive and unknown
values end in an error that names them; `event: error` after HTTP 200 is an error event too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec

from .. import context_errors
from ..assembler import MessageAssembler
from ..events import ErrorEvent, ErrorKind, ResponseEvent
from ..http import HttpAdapter, error_text_from_body
from ..prefix_memo import PrefixMemo, fold_history
from ..settings import ModelSettings, ProviderSettings
from ..sse import SSEEvent
from ..stream import PreparedRequest
from ..transforms import HistoryTransform, Target, sanitize_id, strip_surrogates
from ..types import (
    AssistantMessage,
    DoneReason,
    ImageContent,
    Message,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    Usage,
    UserContent,
    UserMessage,
)

API = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"
DEFAULT_MAX_TOKENS = 8192
DEFAULT_THINKING_BUDGET = 4096
MIN_THINKING_BUDGET = 1024  # the API's minimum budget_tokens
# Room left for the visible answer when max_tokens has to be raised above the thinking budget.
MIN_ANSWER_TOKENS = 1024
EFFORT_BUDGETS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
}
MAX_TOOL_ID_LENGTH = 64
# In-band error types worth a retry when nothing was emitted yet.
TRANSIENT_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error"})
STOP_REASONS: dict[str, DoneReason] = {
    "end_turn": "stop",
    "pause_turn": "stop",  # a long server-tool turn paused; the next request continues it
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "toolUse",
}
REFUSAL_STOP_REASONS = frozenset({"refusal", "sensitive"})

_encoder = msgspec.json.Encoder()
_sorted_encoder = msgspec.json.Encoder(order="deterministic")


# -- request --------------------------------------------------------------------------------


def messages_url(base_url: str) -> str:
    """The endpoint for a configured base URL (see the module docstring for the rule)."""
    base = (base_url or DEFAULT_BASE_URL).rstrip("/")
    if base.endswith("/v1/messages"):
        return base
    if base.endswith("/v1"):
        return base + "/messages"
    return base + "/v1/messages"


def normalize_tool_id(raw: str) -> str:
    """Anthropic accepts tool ids matching `^[a-zA-Z0-9_-]{1,64}$`."""
    return sanitize_id(raw, MAX_TOOL_ID_LENGTH)


def canonical_json(value: Any) -> msgspec.Raw:
    """Free-form JSON (tool schemas, tool arguments, extra body values) with its object keys
    sorted, embedded as is. Stored history goes through the canonical encoding, which sorts
    keys, so without this a turn replayed from the store would serialize differently from the
    same turn held in memory, and the provider's prefix cache would miss."""
    return msgspec.Raw(_sorted_encoder.encode(value))


def _cache_control() -> dict[str, str]:
    return {"type": "ephemeral"}


def system_blocks(system_prompt: str) -> list[dict[str, Any]] | None:
    """The system prompt as one text block carrying the first cache breakpoint."""
    text = strip_surrogates(system_prompt)
    if not text.strip():
        return None
    return [{"type": "text", "text": text, "cache_control": _cache_control()}]


def tool_definition(tool: ToolDefinition) -> dict[str, Any]:
    """The full JSON Schema is kept (no keyword is dropped, keys sorted); `type: object` is
    added only when the schema lacks a type, since the API requires an object schema."""
    schema = tool.parameters
    if "type" not in schema:
        schema = {"type": "object", **schema}
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": canonical_json(schema),
    }


def tool_definitions(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    out = [tool_definition(t) for t in tools]
    out[-1]["cache_control"] = _cache_control()  # breakpoint 2: everything up to the tools
    return out


def _text_block(text: str) -> dict[str, Any] | None:
    """A text block, or None for blank text (the API rejects empty text blocks)."""
    clean = strip_surrogates(text)
    return {"type": "text", "text": clean} if clean.strip() else None


def _image_block(image: ImageContent) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.mime_type, "data": image.data},
    }


def _user_blocks(parts: Sequence[UserContent]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextContent):
            block = _text_block(part.text)
            if block is not None:
                out.append(block)
        else:
            out.append(_image_block(part))
    return out


def user_message(message: UserMessage) -> dict[str, Any] | None:
    """Text and base64 images; blank text is dropped; a message left empty is skipped."""
    content = _user_blocks(message.content)
    return {"role": "user", "content": content} if content else None


def assistant_message(message: AssistantMessage) -> dict[str, Any] | None:
    """An assistant turn already passed through `transform_messages`: any thinking left is from
    this very model, so a signature is replayed byte-for-byte with its text.

    A tool call whose arguments were not a JSON object (`raw_arguments` set) is sent with
    `input: {}`: the API requires an object, and the loop answers such a call with an error
    result that quotes the problem, so the model still learns what went wrong.
    """
    content: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if block.redacted:
                if block.signature:
                    content.append({"type": "redacted_thinking", "data": block.signature})
            elif block.signature:
                content.append(
                    {
                        "type": "thinking",
                        "thinking": strip_surrogates(block.thinking),
                        "signature": block.signature,
                    }
                )
            else:
                # No signature (e.g. from a proxy): the API would reject an unsigned thinking
                # block, so the reasoning is kept as plain text.
                text_block = _text_block(block.thinking)
                if text_block is not None:
                    content.append(text_block)
        elif isinstance(block, TextContent):
            text_block = _text_block(block.text)
            if text_block is not None:
                content.append(text_block)
        else:
            content.append(_tool_use_block(block))
    return {"role": "assistant", "content": content} if content else None


def _tool_use_block(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": canonical_json(call.arguments),
    }


def tool_result_block(message: ToolResultMessage) -> dict[str, Any]:
    """One `tool_result`. Content is a list of text/image blocks; when all of it is blank the key
    is left out (an empty text block would be rejected)."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    content = _user_blocks(message.content)
    if content:
        block["content"] = content
    block["is_error"] = message.is_error
    return block


def tool_results_message(results: Sequence[ToolResultMessage]) -> dict[str, Any]:
    return {"role": "user", "content": [tool_result_block(r) for r in results]}


def provider_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Transformed native history -> provider messages, without cache breakpoints."""
    out: list[dict[str, Any]] = []
    group: list[ToolResultMessage] = []
    for message in messages:
        _append_provider(message, out, group)
    if group:
        out.append(tool_results_message(group))
    return out


def _append_provider(
    message: Message, out: list[dict[str, Any]], group: list[ToolResultMessage]
) -> None:
    if isinstance(message, ToolResultMessage):
        group.append(message)
        return
    if group:
        out.append(tool_results_message(group))
        group.clear()
    converted = (
        user_message(message) if isinstance(message, UserMessage) else assistant_message(message)
    )
    if converted is not None:
        out.append(converted)


class AnthropicHistory:
    """`transform_messages` then `provider_messages`, one native message at a time: the fold
    a longer history of the same conversation resumes from (prefix_memo.py). The dicts it
    built are shared by later requests: `mark_last_block` copies what it marks."""

    __slots__ = ("group", "messages", "transform")

    def __init__(self, target: Target) -> None:
        self.transform = HistoryTransform(target, normalize_tool_id)
        self.messages: list[dict[str, Any]] = []
        self.group: list[ToolResultMessage] = []  # tool results waiting for the group's end

    def copy(self) -> AnthropicHistory:
        other = AnthropicHistory.__new__(AnthropicHistory)
        other.transform = self.transform.copy()
        other.messages = list(self.messages)
        other.group = list(self.group)
        return other

    def feed(self, message: Message) -> None:
        for m in self.transform.feed(message):
            _append_provider(m, self.messages, self.group)

    def finish(self) -> list[dict[str, Any]]:
        """What the end of the history adds (the state stays as it is)."""
        group = [*self.group, *self.transform.finish()]  # results only: they join the group
        return [tool_results_message(group)] if group else []

    def converted(self) -> list[dict[str, Any]]:
        """The whole history as provider messages (no breakpoint): what was built, then what
        the end adds."""
        return [*self.messages, *self.finish()]


def mark_last_block(messages: list[dict[str, Any]]) -> None:
    """Breakpoint 3: the last cacheable block of the last message. Thinking blocks cannot carry
    `cache_control`, so a trailing one is passed over. The message, its content list and the
    block are replaced, not edited: the unmarked ones may be shared with other requests."""
    if not messages:
        return
    content: list[dict[str, Any]] = list(messages[-1]["content"])
    for i in range(len(content) - 1, -1, -1):
        if content[i]["type"] not in ("thinking", "redacted_thinking"):
            content[i] = {**content[i], "cache_control": _cache_control()}
            messages[-1] = {**messages[-1], "content": content}
            return


def thinking_budget(settings: ModelSettings) -> int:
    if settings.reasoning_budget is not None:
        budget = settings.reasoning_budget
    elif settings.reasoning_effort is not None:
        budget = EFFORT_BUDGETS.get(settings.reasoning_effort, DEFAULT_THINKING_BUDGET)
    else:
        budget = DEFAULT_THINKING_BUDGET
    return max(budget, MIN_THINKING_BUDGET)


def thinking_enabled(settings: ModelSettings) -> bool:
    return settings.reasoning and settings.reasoning_effort != "none"


def build_body(
    request: RequestMessages, settings: ModelSettings, messages: Sequence[Message]
) -> dict[str, Any]:
    """The request body in a fixed key order; `messages` is the transformed history."""
    return body_of(request, settings, provider_messages(messages))


def body_of(
    request: RequestMessages, settings: ModelSettings, converted: list[dict[str, Any]]
) -> dict[str, Any]:
    """The request body in a fixed key order around the provider messages."""
    thinking = thinking_enabled(settings)
    max_tokens = settings.max_output_tokens or DEFAULT_MAX_TOKENS
    budget = thinking_budget(settings) if thinking else 0
    if thinking and max_tokens <= budget:
        max_tokens = budget + MIN_ANSWER_TOKENS
    body: dict[str, Any] = {"model": settings.model, "max_tokens": max_tokens, "stream": True}
    system = system_blocks(request.system_prompt)
    if system is not None:
        body["system"] = system
    mark_last_block(converted)
    body["messages"] = converted
    tools = tool_definitions(request.tools)
    if tools is not None:
        body["tools"] = tools
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    elif settings.temperature is not None:
        body["temperature"] = settings.temperature
    for key in sorted(settings.extra_body):
        body[key] = canonical_json(settings.extra_body[key])
    return body


def request_headers(settings: ModelSettings) -> tuple[tuple[str, str], ...]:
    """Non-secret headers. A configured `anthropic-beta` is merged with ours, not replaced."""
    betas = [INTERLEAVED_THINKING_BETA] if thinking_enabled(settings) else []
    headers: list[tuple[str, str]] = [
        ("content-type", "application/json"),
        ("anthropic-version", ANTHROPIC_VERSION),
    ]
    extra: list[tuple[str, str]] = []
    for name in sorted(settings.extra_headers):
        value = settings.extra_headers[name]
        if name.lower() == "anthropic-beta":
            for beta in (b.strip() for b in value.split(",")):
                if beta and beta not in betas:
                    betas.append(beta)
        elif name.lower() != "anthropic-version":
            extra.append((name, value))
        else:
            headers[1] = ("anthropic-version", value)
    if betas:
        headers.append(("anthropic-beta", ",".join(betas)))
    return (*headers, *extra)


# -- stream ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _OpenBlock:
    """A provider content block we are assembling: where it lives natively and what it is."""

    index: int
    kind: str  # "text" | "thinking" | "toolCall"
    start_input: Any = None
    fragments: bool = False


class AnthropicDecoder:
    """Anthropic SSE -> native events through the assembler (sans I/O).

    Every `data` is decoded into plain dicts; malformed JSON raises and the runtime turns that
    into an error event. Unknown event and block types are ignored. Only `message_stop` ends the
    stream successfully; `finish()` without it is an error.
    """

    def __init__(
        self, assembler: MessageAssembler, redact: Callable[[str], str] = lambda text: text
    ) -> None:
        self._asm = assembler
        # Errors the decoder builds do not pass through the runtime's redaction, and in-band
        # error text comes from the provider (which may echo a key), so they are redacted here.
        self._redact = redact
        self._open: dict[int, _OpenBlock] = {}
        self._input = 0
        self._output = 0
        self._cache_read = 0
        self._cache_write = 0
        self._stop_reason: str | None = None
        self._stop_details: Any = None
        self._ended = False

    def feed(self, event: SSEEvent) -> list[ResponseEvent]:
        if self._ended or event.event == "ping":
            return []
        data = msgspec.json.decode(event.data)
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object in the {event.event!r} event")
        kind = "error" if event.event == "error" else data.get("type")
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "content_block_start":
            return self._block_start(data)
        if kind == "content_block_stop":
            return self._block_stop(data)
        if kind == "message_start":
            message = data.get("message")
            if isinstance(message, dict):
                self._message_start(message)
            return []
        if kind == "message_delta":
            self._message_delta(data)
            return []
        if kind == "message_stop":
            return self._message_stop()
        if kind == "error":
            return self._in_band_error(data)
        return []  # ping, and event types added after this was written

    def finish(self) -> list[ResponseEvent]:
        if self._ended:
            return []
        self._ended = True
        return [self._fail("stream ended before message_stop")]

    # -- message level -----------------------------------------------------------------------

    def _message_start(self, message: dict[str, Any]) -> None:
        message_id = message.get("id")
        if isinstance(message_id, str):
            self._asm.set_response_id(message_id)
        model = message.get("model")
        if isinstance(model, str):
            self._asm.set_response_model(model)
        self._update_usage(message.get("usage"))

    def _message_delta(self, data: dict[str, Any]) -> None:
        delta = data.get("delta")
        if isinstance(delta, dict):
            reason = delta.get("stop_reason")
            if isinstance(reason, str):
                self._stop_reason = reason
            details = delta.get("stop_details")
            if details is not None:
                self._stop_details = details
        self._update_usage(data.get("usage"))

    def _update_usage(self, usage: Any) -> None:
        """Usage is cumulative: each report replaces the fields it carries. Proxies leave some
        out or send null (e.g. input_tokens only in message_start), so only present, integer
        fields overwrite."""
        if not isinstance(usage, dict):
            return
        value = usage.get("input_tokens")
        if isinstance(value, int):
            self._input = value
        value = usage.get("output_tokens")
        if isinstance(value, int):
            self._output = value
        value = usage.get("cache_read_input_tokens")
        if isinstance(value, int):
            self._cache_read = value
        value = usage.get("cache_creation_input_tokens")
        if isinstance(value, int):
            self._cache_write = value
        self._asm.set_usage(
            Usage(
                input=self._input,
                output=self._output,
                cache_read=self._cache_read,
                cache_write=self._cache_write,
            )
        )

    def _message_stop(self) -> list[ResponseEvent]:
        self._ended = True
        asm = self._asm
        reason = self._stop_reason
        if reason is None:
            # No stop_reason at all (some proxies): judge by what was produced.
            reason = "tool_use" if asm.has_tool_calls() else "end_turn"
        done = STOP_REASONS.get(reason)
        if done is not None:
            out: list[ResponseEvent] = []
            out.extend(asm.close_all())  # a max_tokens cut can leave a block without its stop
            out.append(asm.done(done))
            return out
        if reason in REFUSAL_STOP_REASONS:
            return [self._fail(self._refusal_text(reason))]
        return [self._fail(f"unsupported stop_reason {reason!r}")]

    def _refusal_text(self, reason: str) -> str:
        text = f"the model stopped with stop_reason {reason!r}"
        details = self._stop_details
        if isinstance(details, dict):
            category = details.get("category")
            if isinstance(category, str) and category:
                text += f" (category {category})"
            explanation = details.get("explanation") or details.get("message")
            if isinstance(explanation, str) and explanation:
                text += f": {explanation}"
        return text

    def _in_band_error(self, data: dict[str, Any]) -> list[ResponseEvent]:
        """`event: error` after HTTP 200, e.g. overloaded_error in the middle of a stream."""
        self._ended = True
        error = data.get("error")
        kind: Any = None
        message: Any = None
        if isinstance(error, dict):
            kind = error.get("type")
            message = error.get("message")
        if not isinstance(message, str) or not message:
            message = msgspec.json.encode(data).decode()
        text = f"{kind}: {message}" if isinstance(kind, str) and kind else message
        return [self._fail(text, transient=kind in TRANSIENT_ERROR_TYPES)]

    def _fail(self, text: str, *, transient: bool = False) -> ErrorEvent:
        message = self._redact(f"{self._asm.provider}: {text}")
        return self._asm.fail(message, transient=transient)

    # -- content blocks ----------------------------------------------------------------------

    def _block_start(self, data: dict[str, Any]) -> list[ResponseEvent]:
        index = data.get("index")
        block = data.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            return []
        asm = self._asm
        kind = block.get("type")
        out: list[ResponseEvent] = []
        if kind == "text":
            native, text_start = asm.open_text()
            out.append(text_start)
            self._open[index] = _OpenBlock(native, "text")
            text = block.get("text")
            if isinstance(text, str) and text:
                out.append(asm.text_delta(native, text))
        elif kind == "thinking":
            signature = block.get("signature")
            native, thinking_start = asm.open_thinking(
                signature=signature if isinstance(signature, str) and signature else None
            )
            out.append(thinking_start)
            self._open[index] = _OpenBlock(native, "thinking")
            text = block.get("thinking")
            if isinstance(text, str) and text:
                out.append(asm.thinking_delta(native, text))
        elif kind == "redacted_thinking":
            data_blob = block.get("data")
            native, thinking_start = asm.open_thinking(
                signature=data_blob if isinstance(data_blob, str) else None, redacted=True
            )
            out.append(thinking_start)
            self._open[index] = _OpenBlock(native, "thinking")
        elif kind == "tool_use":
            call_id = block.get("id")
            name = block.get("name")
            native, call_start = asm.open_tool_call(
                call_id if isinstance(call_id, str) else "",
                name if isinstance(name, str) else "",
            )
            out.append(call_start)
            self._open[index] = _OpenBlock(native, "toolCall", start_input=block.get("input"))
        # Anything else is a server-side block (see the module docstring): skipped.
        return out

    def _delta(self, data: dict[str, Any]) -> list[ResponseEvent]:
        index = data.get("index")
        delta = data.get("delta")
        if not isinstance(index, int) or not isinstance(delta, dict):
            return []
        block = self._open.get(index)
        if block is None:
            return []  # a skipped server-side block
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if block.kind == "text" and isinstance(text, str) and text:
                return [self._asm.text_delta(block.index, text)]
        elif kind == "input_json_delta":
            fragment = delta.get("partial_json")
            if block.kind == "toolCall" and isinstance(fragment, str) and fragment:
                block.fragments = True
                return [self._asm.tool_call_delta(block.index, fragment)]
        elif kind == "thinking_delta":
            text = delta.get("thinking")
            if block.kind == "thinking" and isinstance(text, str) and text:
                return [self._asm.thinking_delta(block.index, text)]
        elif kind == "signature_delta":
            signature = delta.get("signature")
            if block.kind == "thinking" and isinstance(signature, str):
                self._asm.append_signature(block.index, signature)
        return []  # citations_delta and unknown deltas

    def _block_stop(self, data: dict[str, Any]) -> list[ResponseEvent]:
        index = data.get("index")
        block = self._open.pop(index, None) if isinstance(index, int) else None
        if block is None:
            return []
        asm = self._asm
        if block.kind == "text":
            return [asm.close_text(block.index)]
        if block.kind == "thinking":
            return [asm.close_thinking(block.index)]
        start_input = block.start_input
        if not block.fragments and isinstance(start_input, dict) and start_input:
            # Input given whole in content_block_start (non-streaming proxies): surface it as
            # one fragment so the deltas still add up to the arguments.
            fragment = _encoder.encode(start_input).decode()
            return [
                asm.tool_call_delta(block.index, fragment),
                asm.close_tool_call(block.index, arguments=start_input),
            ]
        return [asm.close_tool_call(block.index)]


# -- adapter --------------------------------------------------------------------------------


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
        body = body_of(request, settings, history.converted())
        return PreparedRequest(
            url=messages_url(self.provider.base_url),
            body=_encoder.encode(body),
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
