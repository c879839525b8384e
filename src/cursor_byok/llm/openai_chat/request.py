"""OpenAI Chat Completions request building: native request -> the JSON body, one pure function
per message kind, so an older message always serializes to the same bytes and provider prefix
caches keep hitting.

Endpoint differences live in one small frozen record, `ChatCompat`, derived from the
`ProviderSettings` by `detect_compat` and overridable by passing `compat=` to the adapter:

- openai (host api.openai.com, or provider name "openai"): `max_completion_tokens`;
  `developer` role for the system prompt when `settings.reasoning`; `prompt_cache_key` only
  when the host really is api.openai.com (other hosts may reject unknown fields).
- azure (host *.openai.azure.com, or name "azure"): auth header `api-key: <key>` instead of
  `Authorization: Bearer`; `max_completion_tokens` (Azure's reasoning models require it). A
  base_url with a query string (`...?api-version=...`) keeps it after `/chat/completions`.
- deepseek: `max_tokens`; `thinking: {"type": "enabled"}` when `settings.reasoning`; the
  previous turns' `reasoning_content` is sent back (DeepSeek answers 400 on tool-call turns
  without it), and `reasoning_content: ""` on assistant turns that have none.
- openrouter: `max_tokens`; reasoning knobs as the `reasoning` object; encrypted
  `reasoning_details` entries are kept on the matching tool call (`thought_signature`, JSON)
  and sent back as `reasoning_details` on the assistant message.
- generic (llama.cpp, vLLM, Ollama, anything else): `max_tokens`, `reasoning_effort`.

`tools: []` is sent for a history with tool calls but no tool definitions only when
`ChatCompat.empty_tools_for_tool_history` is set: OpenAI, Azure, DeepSeek and recent vLLM answer
400 to an empty array, while some LiteLLM/Anthropic proxies demand it, so it is off by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from ..append_only import Shared
from ..encoded_items import EncodedItems
from ..prefix_memo import PrefixMemo, fold_history
from ..settings import ModelSettings, ProviderSettings
from ..tools_json import ToolsJson
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

API = "openai-chat"
CHAT_PATH = "/chat/completions"
OPENAI_HOST = "api.openai.com"
AZURE_HOST_SUFFIX = ".openai.azure.com"
MAX_TOOL_CALL_ID = 40  # OpenAI rejects longer tool call ids
# Delta fields that carry reasoning text, in order of preference; the field a thinking block
# came from is its signature, so it is sent back under the same name.
REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_text")
DEFAULT_REASONING_FIELD = "reasoning_content"
IMAGE_ONLY_TOOL_RESULT = "(see attached image)"
TOOL_IMAGES_PREFIX = "Attached image(s) from tool result:"

Flavor = Literal["openai", "azure", "deepseek", "openrouter", "generic"]

_sorted_encoder = msgspec.json.Encoder(order="deterministic")
_encode = msgspec.json.encode
_decode = msgspec.json.decode


# -- compat ------------------------------------------------------------------------------------


class ChatCompat(msgspec.Struct, frozen=True):
    """What one OpenAI-compatible endpoint accepts. Derived from the provider settings by
    `detect_compat`; pass a replaced copy to the adapter to override a flag."""

    flavor: Flavor = "generic"
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_tokens"
    developer_role: bool = False  # system prompt as role "developer" for reasoning models
    send_prompt_cache_key: bool = False
    reasoning_format: Literal["effort", "openrouter", "deepseek"] = "effort"
    auth_header: Literal["authorization", "api-key"] = "authorization"
    empty_tools_for_tool_history: bool = False
    empty_reasoning_field: bool = False  # `reasoning_content: ""` on turns without reasoning


GENERIC = ChatCompat()


def _host(base_url: str) -> str:
    try:
        return (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        return ""


def detect_compat(provider: ProviderSettings) -> ChatCompat:
    """Flavor from the base_url host first, then from the provider name."""
    host = _host(provider.base_url)
    name = provider.name.lower()
    if host == OPENAI_HOST or (not host.endswith(AZURE_HOST_SUFFIX) and name == "openai"):
        return ChatCompat(
            flavor="openai",
            max_tokens_field="max_completion_tokens",
            developer_role=True,
            send_prompt_cache_key=host == OPENAI_HOST,
        )
    if host.endswith(AZURE_HOST_SUFFIX) or name == "azure":
        return ChatCompat(
            flavor="azure", max_tokens_field="max_completion_tokens", auth_header="api-key"
        )
    if "deepseek" in host or name == "deepseek":
        return ChatCompat(
            flavor="deepseek", reasoning_format="deepseek", empty_reasoning_field=True
        )
    if "openrouter" in host or name == "openrouter":
        return ChatCompat(flavor="openrouter", reasoning_format="openrouter")
    return GENERIC


def chat_url(base_url: str) -> str:
    """`{base_url}/chat/completions`, keeping a query string (Azure `api-version`) at the end."""
    base, sep, query = base_url.partition("?")
    return base.rstrip("/") + CHAT_PATH + sep + query


def normalize_tool_call_id(raw: str) -> str:
    """A foreign id as Chat accepts it: the part before "|" (Responses `call_id|item_id`),
    characters outside [A-Za-z0-9_-] replaced by "_", at most 40 characters (long ids keep a
    short hash of the whole id, so two ids with a common prefix stay distinct)."""
    head = raw.split("|", 1)[0]
    return sanitize_id(head, MAX_TOOL_CALL_ID)


# -- request: one function per message kind ----------------------------------------------------


def _image_url(image: ImageContent) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{image.mime_type};base64,{image.data}"},
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": strip_surrogates(text)}


def system_message(prompt: str, role: str) -> dict[str, Any]:
    return {"role": role, "content": strip_surrogates(prompt)}


def user_message(message: UserMessage) -> dict[str, Any]:
    """A single text part is sent as a plain string (what every compatible server accepts)."""
    parts = message.content
    if len(parts) == 1 and isinstance(parts[0], TextContent):
        return {"role": "user", "content": strip_surrogates(parts[0].text)}
    if not parts:
        return {"role": "user", "content": ""}
    return {"role": "user", "content": [_user_part(p) for p in parts]}


def _user_part(part: UserContent) -> dict[str, Any]:
    if isinstance(part, TextContent):
        return _text_part(part.text)
    return _image_url(part)


def tool_arguments_text(call: ToolCall) -> str:
    """Arguments as the JSON string Chat wants: the raw text when the model's own text was not
    valid JSON (sent back as it came), else the object with sorted keys, so a message read back
    from storage (canonical bytes sort keys) serializes identically."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    return _sorted_encoder.encode(call.arguments).decode()


def _raw_json(text: str) -> msgspec.Raw | None:
    """Stored JSON embedded byte-for-byte, or None if it is not valid JSON."""
    try:
        _decode(text)
    except msgspec.DecodeError:
        return None
    return msgspec.Raw(text.encode())


def assistant_message(
    message: AssistantMessage, empty_reasoning_field: bool = False
) -> dict[str, Any] | None:
    """Text blocks joined into one plain string (null if none); reasoning (already limited to
    the same model by `transform_messages`) back under the field it came from; tool calls with
    their ids as stored. A message with neither text nor tool calls is dropped (None).
    `empty_reasoning_field` (DeepSeek) sends `reasoning_content: ""` on a turn without
    reasoning: in thinking mode DeepSeek answers 400 "Missing `reasoning_content` field" when
    an assistant turn (e.g. one from another model) lacks it."""
    texts = [b.text for b in message.content if isinstance(b, TextContent) and b.text]
    thinking = [b for b in message.content if isinstance(b, ThinkingContent)]
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    if not texts and not calls:
        return None
    out: dict[str, Any] = {
        "role": "assistant",
        "content": strip_surrogates("\n\n".join(texts)) if texts else None,
    }
    reasoning = "".join(b.thinking for b in thinking if not b.redacted)
    if reasoning:
        field = thinking[0].signature
        if field not in REASONING_FIELDS:
            field = DEFAULT_REASONING_FIELD
        out[field] = strip_surrogates(reasoning)
    elif empty_reasoning_field:
        out[DEFAULT_REASONING_FIELD] = ""
    if calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": strip_surrogates(tool_arguments_text(c))},
            }
            for c in calls
        ]
        details = [_raw_json(c.thought_signature) for c in calls if c.thought_signature]
        if any(d is not None for d in details):
            out["reasoning_details"] = [d for d in details if d is not None]
    return out


def tool_result_message(message: ToolResultMessage) -> dict[str, Any]:
    text = "\n".join(p.text for p in message.content if isinstance(p, TextContent))
    if not text and any(isinstance(p, ImageContent) for p in message.content):
        text = IMAGE_ONLY_TOOL_RESULT
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": strip_surrogates(text)}


def tool_images_message(images: Sequence[ImageContent]) -> dict[str, Any]:
    """Chat tool messages carry text only: images from a run of tool results follow it as one
    user message."""
    return {
        "role": "user",
        "content": [_text_part(TOOL_IMAGES_PREFIX), *(_image_url(i) for i in images)],
    }


def tool_definition(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": strip_surrogates(tool.description),
            "parameters": tool.parameters,
        },
    }


_tools_json = ToolsJson(tool_definition)


def convert_messages(
    messages: Sequence[Message], compat: ChatCompat = GENERIC
) -> list[dict[str, Any]]:
    """History (already transformed for the target) as Chat messages. Each message maps on its
    own, except that tool-result images are gathered after the run of tool messages they
    belong to (a user message may not sit between the tool results of one turn)."""
    out: list[dict[str, Any]] = []
    images: list[ImageContent] = []
    for message in messages:
        _append_chat(message, out, images, compat)
    if images:
        out.append(tool_images_message(images))
    return out


def _append_chat(
    message: Message,
    out: list[dict[str, Any]] | Shared[dict[str, Any]],
    images: list[ImageContent],
    compat: ChatCompat,
) -> None:
    if not isinstance(message, ToolResultMessage) and images:
        out.append(tool_images_message(images))
        images.clear()
    if isinstance(message, UserMessage):
        out.append(user_message(message))
    elif isinstance(message, AssistantMessage):
        converted = assistant_message(message, compat.empty_reasoning_field)
        if converted is not None:
            out.append(converted)
    else:
        out.append(tool_result_message(message))
        images.extend(p for p in message.content if isinstance(p, ImageContent))


class ChatHistory:
    """`transform_messages` then `convert_messages`, one native message at a time: the fold
    a longer history of the same conversation resumes from (prefix_memo.py), so a call
    converts only the messages appended since the last one. The dicts it built are shared
    by later requests and never changed."""

    __slots__ = ("compat", "encoded", "images", "messages", "tool_history", "transform")

    def __init__(self, target: Target, compat: ChatCompat) -> None:
        self.transform = HistoryTransform(target, normalize_tool_call_id)
        self.compat = compat
        self.messages: Shared[dict[str, Any]] = Shared()  # shared by copies
        # messages[i] as JSON, encoded once when it was built (encode_body joins them)
        self.encoded = EncodedItems()
        self.images: list[ImageContent] = []
        self.tool_history = False  # a tool call or result was sent (`tools: []` needs it)

    def copy(self) -> ChatHistory:
        other = ChatHistory.__new__(ChatHistory)
        other.transform = self.transform.copy()
        other.compat = self.compat
        other.messages = self.messages.copy()
        other.encoded = self.encoded.copy()
        other.images = list(self.images)
        other.tool_history = self.tool_history
        return other

    def feed(self, message: Message) -> None:
        for m in self.transform.feed(message):
            self._note(m)
            _append_chat(m, self.messages, self.images, self.compat)
        self.encoded.sync(self.messages, _encode)

    def finish(self) -> list[dict[str, Any]]:
        """What the end of the history adds: results for calls left unanswered, images
        still waiting for the end of their run of tool results. The state stays as it is."""
        out: list[dict[str, Any]] = []
        images = list(self.images)
        for m in self.transform.finish():
            _append_chat(m, out, images, self.compat)
        if images:
            out.append(tool_images_message(images))
        return out

    def converted(self) -> list[dict[str, Any]]:
        """The whole history as Chat messages: what was built, then what the end adds."""
        return [*self.messages, *self.finish()]

    def _note(self, message: Message) -> None:
        if isinstance(message, ToolResultMessage) or (
            isinstance(message, AssistantMessage) and message.tool_calls
        ):
            self.tool_history = True


def _reasoning_params(settings: ModelSettings, compat: ChatCompat) -> dict[str, Any]:
    effort = settings.reasoning_effort
    if compat.reasoning_format == "openrouter":
        if effort is not None:
            return {"reasoning": {"effort": effort}}
        if settings.reasoning_budget is not None:
            return {"reasoning": {"max_tokens": settings.reasoning_budget}}
        if settings.reasoning:
            return {"reasoning": {"enabled": True}}
        return {}
    out: dict[str, Any] = {}
    if compat.reasoning_format == "deepseek" and settings.reasoning:
        out["thinking"] = {"type": "enabled"}
    if effort is not None:
        out["reasoning_effort"] = effort
    return out


def build_body(
    request: RequestMessages,
    settings: ModelSettings,
    provider_name: str,
    compat: ChatCompat,
    memo: PrefixMemo[ChatHistory] | None = None,
) -> dict[str, Any]:
    """The request body as a dict in a fixed key order (insertion order is the wire order).
    With `memo`, the history's conversion continues from the conversation's previous call."""
    history = _history(request, settings, provider_name, compat, memo)
    body: dict[str, Any] = {"model": settings.model, "messages": []}
    if request.system_prompt:
        body["messages"].append(_system(request, settings, compat))
    body["messages"].extend(history.converted())
    body.update(_options(request, settings, compat, history))
    return body


def encode_body(
    request: RequestMessages,
    settings: ModelSettings,
    provider_name: str,
    compat: ChatCompat,
    memo: PrefixMemo[ChatHistory] | None = None,
) -> bytes:
    """`build_body` as JSON, byte for byte, without encoding the history again: each
    converted message was encoded once when the fold built it, and the body is joined from
    those bytes (issue 28: the whole history was encoded on every call)."""
    if "model" in settings.extra_body or "messages" in settings.extra_body:
        # they replace the keys this writes itself, where they stand: the whole body
        return _encode(build_body(request, settings, provider_name, compat, memo))
    history = _history(request, settings, provider_name, compat, memo)
    parts = [_encode(_system(request, settings, compat))] if request.system_prompt else []
    parts += filter(None, history.encoded.runs())  # a kept join and the items after it
    parts += [_encode(m) for m in history.finish()]
    options = _encode(_options(request, settings, compat, history, raw_tools=True))  # {"stream"
    out = [b'{"model":', _encode(settings.model), b',"messages":[']
    for k, part in enumerate(parts):  # one join: the history's bytes are copied once
        out += (b",", part) if k else (part,)
    out += (b"],", options[1:])
    return b"".join(out)


def _history(
    request: RequestMessages,
    settings: ModelSettings,
    provider_name: str,
    compat: ChatCompat,
    memo: PrefixMemo[ChatHistory] | None,
) -> ChatHistory:
    target = Target(api=API, provider=provider_name, model=settings.model)
    return fold_history(
        request.messages, (target, compat), lambda: ChatHistory(target, compat), memo
    )


def _system(request: RequestMessages, settings: ModelSettings, compat: ChatCompat) -> Any:
    role = "developer" if compat.developer_role and settings.reasoning else "system"
    return system_message(request.system_prompt, role)


def _options(
    request: RequestMessages,
    settings: ModelSettings,
    compat: ChatCompat,
    history: ChatHistory,
    *,
    raw_tools: bool = False,
) -> dict[str, Any]:
    """Every key of the body after `messages`, in wire order (never empty: `stream`).
    `raw_tools`: the tool list as its JSON, encoded once per tools tuple (tools_json.py)."""
    body: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
    if settings.max_output_tokens is not None:
        body[compat.max_tokens_field] = settings.max_output_tokens
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    body.update(_reasoning_params(settings, compat))
    if request.tools:
        tools = request.tools
        body["tools"] = _tools_json(tools) if raw_tools else [tool_definition(t) for t in tools]
    elif compat.empty_tools_for_tool_history and history.tool_history:
        body["tools"] = []
    if settings.cache_key and compat.send_prompt_cache_key:
        body["prompt_cache_key"] = settings.cache_key
    for key in sorted(settings.extra_body):
        body[key] = settings.extra_body[key]
    return body
