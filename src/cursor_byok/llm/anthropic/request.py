"""Anthropic Messages request building: native request -> the JSON body of `POST /v1/messages`.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..append_only import Shared
from ..encoded_items import PLACEHOLDER, EncodedItems, splice
from ..settings import ModelSettings
from ..transforms import HistoryTransform, Target, sanitize_id, strip_surrogates
from ..types import (
    AssistantMessage,
    ImageContent,
    Message,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    UserContent,
    UserMessage,
)

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

_sorted_encoder = msgspec.json.Encoder(order="deterministic")
_encoder = msgspec.json.Encoder()


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
    message: Message,
    out: list[dict[str, Any]] | Shared[dict[str, Any]],
    group: list[ToolResultMessage],
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

    __slots__ = ("encoded", "group", "messages", "transform")

    def __init__(self, target: Target) -> None:
        self.transform = HistoryTransform(target, normalize_tool_id)
        self.messages: Shared[dict[str, Any]] = Shared()  # shared by copies
        self.group: list[ToolResultMessage] = []  # tool results waiting for the group's end
        self.encoded = EncodedItems()  # messages[i] as JSON, unmarked, encoded once

    def copy(self) -> AnthropicHistory:
        other = AnthropicHistory.__new__(AnthropicHistory)
        other.transform = self.transform.copy()
        other.messages = self.messages.copy()
        other.group = list(self.group)
        other.encoded = self.encoded.copy()
        return other

    def feed(self, message: Message) -> None:
        for m in self.transform.feed(message):
            _append_provider(m, self.messages, self.group)
        self.encoded.sync(self.messages)

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
    mark_last_block(converted)
    return _body(request, settings, converted)


def encode_body(
    request: RequestMessages, settings: ModelSettings, history: AnthropicHistory
) -> bytes:
    """`body_of(request, settings, history.converted())` as JSON, byte for byte, without
    encoding the history again (encoded_items.py): the messages before the breakpoint as the
    fold encoded them, the marked last one and what the end adds encoded now."""
    tail = history.finish()
    count = len(history.encoded)
    if not tail and count:  # the last built message takes the breakpoint
        count -= 1
        tail = [history.messages[-1]]
    mark_last_block(tail)
    pieces = [*history.encoded.runs(count), *(_encoder.encode(m) for m in tail)]
    body = splice(_encoder, _body(request, settings, PLACEHOLDER), "messages", pieces)
    if body is None:
        return _encoder.encode(body_of(request, settings, history.converted()))
    return body


def _body(request: RequestMessages, settings: ModelSettings, messages: Any) -> dict[str, Any]:
    thinking = thinking_enabled(settings)
    max_tokens = settings.max_output_tokens or DEFAULT_MAX_TOKENS
    budget = thinking_budget(settings) if thinking else 0
    if thinking and max_tokens <= budget:
        max_tokens = budget + MIN_ANSWER_TOKENS
    body: dict[str, Any] = {"model": settings.model, "max_tokens": max_tokens, "stream": True}
    system = system_blocks(request.system_prompt)
    if system is not None:
        body["system"] = system
    body["messages"] = messages
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
