"""Gemini request building: native request -> the body of `streamGenerateContent?alt=sse`.

The native history becomes `contents` (roles user/model) with `systemInstruction`,
`tools[].functionDeclarations` (full JSON Schema in `parametersJsonSchema`) and
`generationConfig`. The body is a function of the history alone, serialized once; each message
maps to its own `contents` item(s), so a longer history only appends items (Gemini's implicit
prefix cache needs nothing else: there are no cache markers).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypeAlias
from urllib.parse import quote

import msgspec

from ..append_only import Shared
from ..canonical import sorted_value
from ..encoded_items import PLACEHOLDER, EncodedItems, splice
from ..prefix_memo import PrefixMemo, fold_history
from ..settings import ModelSettings
from ..transforms import HistoryTransform, Target, sanitize_id, strip_surrogates
from ..types import (
    AssistantMessage,
    ImageContent,
    Message,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)

API = "gemini"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
# Ids are only ours (Gemini matches results by name and order), so a plain safe alphabet will do.
MAX_TOOL_CALL_ID = 64
# Google's documented value for a functionCall part whose real signature is unknown (a call made
# by another model): Gemini 3 rejects an unsigned first call of a turn with a 400 otherwise.
SKIP_SIGNATURE = "skip_thought_signature_validator"
TOOL_IMAGE_TEXT = "Tool result image:"
# Gemini 3 takes a thinking level, not a budget; Gemini 3 Pro knows only "low" and "high", so
# every effort maps onto those two (3.x cannot switch thinking off; "none" is its lowest level).
EFFORT_TO_LEVEL: dict[str, str] = {
    "none": "low",
    "minimal": "low",
    "low": "low",
    "medium": "high",
    "high": "high",
    "xhigh": "high",
}
# Gemini 2.x takes a token budget; an effort without an explicit budget maps to these.
EFFORT_TO_BUDGET: dict[str, int] = {
    "none": 0,
    "minimal": 1024,
    "low": 4096,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
}

_GEMINI_VERSION = re.compile(r"gemini-(\d+)")
# Standard or URL-safe base64 (protobuf JSON accepts both), padded or not.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")

Json: TypeAlias = dict[str, Any]


def normalize_tool_call_id(raw: str) -> str:
    """Foreign tool-call ids rewritten to [A-Za-z0-9_-], at most 64 characters."""
    return sanitize_id(raw, MAX_TOOL_CALL_ID)


def generated_tool_call_id(name: str, response_id: str | None, n: int) -> str:
    """The id given to the n-th call of a response when Gemini sent none. Derived from the
    response only (never time or randomness), so a replayed stream yields the same ids."""
    return f"{name}_{response_id or 'r'}_{n}"


def gemini_major_version(model: str) -> int | None:
    match = _GEMINI_VERSION.search(model)
    return int(match.group(1)) if match else None


def is_valid_signature(signature: str | None) -> bool:
    """Signatures are base64 bytes; anything else would be rejected by the API, so it is dropped."""
    if not signature or not _BASE64.fullmatch(signature):
        return False
    return len(signature) % 4 == 0 if signature.endswith("=") else len(signature) % 4 != 1


def _text(text: str) -> str:
    return strip_surrogates(text)


def _image_part(image: ImageContent) -> Json:
    return {"inlineData": {"mimeType": image.mime_type, "data": image.data}}


def user_content(message: UserMessage) -> Json | None:
    """A user turn; None when nothing is left (Gemini rejects a content without parts)."""
    parts: list[Json] = []
    for block in message.content:
        if isinstance(block, TextContent):
            if block.text:
                parts.append({"text": _text(block.text)})
        else:
            parts.append(_image_part(block))
    return {"role": "user", "parts": parts} if parts else None


def model_content(
    message: AssistantMessage, *, same_model: bool, gemini3: bool, echoed_ids: set[str]
) -> Json | None:
    """A model turn. Signatures go back only to the model that made them and only when they are
    valid base64, each on its own part (never moved). `functionCall.id` is sent only when the
    model gave one (our generated ids are recognised and left out); such ids are added to
    `echoed_ids` so the matching results carry them too."""
    parts: list[Json] = []
    call_parts: list[Json] = []
    n = 0
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if block.redacted:
                continue
            signature = (
                block.signature if same_model and is_valid_signature(block.signature) else None
            )
            if not block.thinking and signature is None:
                continue
            part: Json = {"thought": True, "text": _text(block.thinking)}
            if signature is not None:
                part["thoughtSignature"] = signature
            parts.append(part)
        elif isinstance(block, TextContent):
            signature = (
                block.signature if same_model and is_valid_signature(block.signature) else None
            )
            if not block.text and signature is None:
                continue
            part = {"text": _text(block.text)}
            if signature is not None:
                part["thoughtSignature"] = signature
            parts.append(part)
        else:
            call: Json = {"name": block.name, "args": sorted_value(block.arguments)}
            if same_model and block.id != generated_tool_call_id(
                block.name, message.response_id, n
            ):
                call["id"] = block.id
                echoed_ids.add(block.id)
            n += 1
            part = {"functionCall": call}
            if same_model and is_valid_signature(block.thought_signature):
                part["thoughtSignature"] = block.thought_signature
            parts.append(part)
            call_parts.append(part)
    if gemini3 and call_parts and not any("thoughtSignature" in p for p in call_parts):
        call_parts[0]["thoughtSignature"] = SKIP_SIGNATURE
    return {"role": "model", "parts": parts} if parts else None


def tool_results_contents(
    results: Sequence[ToolResultMessage], *, gemini3: bool, echoed_ids: set[str]
) -> list[Json]:
    """Consecutive tool results as one user turn of `functionResponse` parts.

    Merging is prefix-safe: the loop appends every result of an assistant turn before it sends
    the next request, so the merged turn is already complete the first time it is sent and never
    changes afterwards. Images go inside the response for Gemini 3, else in a user turn after it.
    """
    parts: list[Json] = []
    images: list[Json] = []
    for result in results:
        text = _text(result.text)
        result_images = [_image_part(b) for b in result.content if isinstance(b, ImageContent)]
        response: Json = {"error": text} if result.is_error else {"output": text}
        fr: Json = {"name": result.tool_name, "response": response}
        if result.tool_call_id in echoed_ids:
            fr["id"] = result.tool_call_id
        if result_images and gemini3:
            fr["parts"] = result_images
        else:
            images.extend(result_images)
        parts.append({"functionResponse": fr})
    out: list[Json] = [{"role": "user", "parts": parts}] if parts else []
    if images:
        out.append({"role": "user", "parts": [{"text": TOOL_IMAGE_TEXT}, *images]})
    return out


def build_contents(messages: Sequence[Message], target: Target) -> list[Json]:
    """History (already through `transform_messages`) as the `contents` array."""
    gemini3 = (gemini_major_version(target.model) or 0) >= 3
    echoed: set[str] = set()
    out: list[Json] = []
    results: list[ToolResultMessage] = []
    for message in messages:
        _append_content(message, target, gemini3, out, results, echoed)
    if results:
        out.extend(tool_results_contents(results, gemini3=gemini3, echoed_ids=echoed))
    return out


def _append_content(
    message: Message,
    target: Target,
    gemini3: bool,
    out: list[Json] | Shared[Json],
    results: list[ToolResultMessage],
    echoed: set[str],
) -> None:
    if isinstance(message, ToolResultMessage):
        results.append(message)
        return
    if results:
        out.extend(tool_results_contents(results, gemini3=gemini3, echoed_ids=echoed))
        results.clear()
    item: Json | None
    if isinstance(message, UserMessage):
        item = user_content(message)
    else:
        item = model_content(
            message, same_model=target.produced(message), gemini3=gemini3, echoed_ids=echoed
        )
    if item is not None:
        out.append(item)


class GeminiHistory:
    """`transform_messages` then `build_contents`, one native message at a time: the fold a
    longer history of the same conversation resumes from (prefix_memo.py). The contents it
    built are shared by later requests and never changed."""

    __slots__ = ("contents", "echoed", "encoded", "gemini3", "results", "transform")

    def __init__(self, target: Target) -> None:
        self.transform = HistoryTransform(target, normalize_tool_call_id)
        self.gemini3 = (gemini_major_version(target.model) or 0) >= 3
        self.contents: Shared[Json] = Shared()  # shared by copies
        self.results: list[ToolResultMessage] = []  # waiting for the end of their run
        self.echoed: set[str] = set()  # call ids sent to the model, so their results too
        self.encoded = EncodedItems()  # contents[i] as JSON, encoded once (encode_body)

    def copy(self) -> GeminiHistory:
        other = GeminiHistory.__new__(GeminiHistory)
        other.transform = self.transform.copy()
        other.gemini3 = self.gemini3
        other.contents = self.contents.copy()
        other.results = list(self.results)
        other.echoed = set(self.echoed)
        other.encoded = self.encoded.copy()
        return other

    def feed(self, message: Message) -> None:
        target = self.transform.target
        for m in self.transform.feed(message):
            _append_content(m, target, self.gemini3, self.contents, self.results, self.echoed)
        self.encoded.sync(self.contents)

    def finish(self) -> list[Json]:
        """What the end of the history adds (the state stays as it is)."""
        results = [*self.results, *self.transform.finish()]
        if not results:
            return []
        return tool_results_contents(results, gemini3=self.gemini3, echoed_ids=self.echoed)

    def converted(self) -> list[Json]:
        """The whole history as `contents`: what was built, then what the end adds."""
        return [*self.contents, *self.finish()]


def tool_declaration(tool: ToolDefinition) -> Json:
    # Keys sorted like the canonical store sorts them: a request rebuilt from stored history
    # must give the same bytes as the in-memory one (schemas and arguments alike).
    return {
        "name": tool.name,
        "description": _text(tool.description),
        "parametersJsonSchema": sorted_value(tool.parameters),
    }


def thinking_config(settings: ModelSettings) -> Json:
    config: Json = {"includeThoughts": True}
    if settings.reasoning_budget is not None:
        config["thinkingBudget"] = settings.reasoning_budget
    elif settings.reasoning_effort is not None:
        if (gemini_major_version(settings.model) or 0) >= 3:
            config["thinkingLevel"] = EFFORT_TO_LEVEL[settings.reasoning_effort]
        else:
            config["thinkingBudget"] = EFFORT_TO_BUDGET[settings.reasoning_effort]
    return config


def generation_config(settings: ModelSettings) -> Json:
    config: Json = {}
    if settings.temperature is not None:
        config["temperature"] = settings.temperature
    if settings.max_output_tokens is not None:
        config["maxOutputTokens"] = settings.max_output_tokens
    if settings.reasoning:
        config["thinkingConfig"] = thinking_config(settings)
    return config


def build_body(
    request: RequestMessages,
    settings: ModelSettings,
    provider: str,
    memo: PrefixMemo[GeminiHistory] | None = None,
) -> Json:
    """The request body in a fixed key order; `extra_body` keys last, sorted. With `memo`,
    the history's conversion continues from the conversation's previous call."""
    return _body(request, settings, _history(request, settings, provider, memo).converted())


def encode_body(
    request: RequestMessages,
    settings: ModelSettings,
    provider: str,
    memo: PrefixMemo[GeminiHistory] | None = None,
) -> bytes:
    """`build_body` as JSON, byte for byte, without encoding the history again: each content
    was encoded once when the fold built it (encoded_items.py)."""
    history = _history(request, settings, provider, memo)
    pieces = [*history.encoded.runs(), *(_encoder.encode(c) for c in history.finish())]
    body = splice(_encoder, _body(request, settings, PLACEHOLDER), "contents", pieces)
    if body is None:
        return _encoder.encode(_body(request, settings, history.converted()))
    return body


_encoder = msgspec.json.Encoder()


def _history(
    request: RequestMessages,
    settings: ModelSettings,
    provider: str,
    memo: PrefixMemo[GeminiHistory] | None,
) -> GeminiHistory:
    target = Target(api=API, provider=provider, model=settings.model)
    return fold_history(request.messages, target, lambda: GeminiHistory(target), memo)


def _body(request: RequestMessages, settings: ModelSettings, contents: Any) -> Json:
    body: Json = {}
    if request.system_prompt:
        body["systemInstruction"] = {"parts": [{"text": _text(request.system_prompt)}]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [tool_declaration(t) for t in request.tools]}]
    body["contents"] = contents
    config = generation_config(settings)
    if config:
        body["generationConfig"] = config
    for key in sorted(settings.extra_body):
        body[key] = settings.extra_body[key]
    return body


def stream_url(base_url: str, model: str) -> str:
    """The key never goes in the URL: URLs end up in error messages and logs."""
    base = (base_url or DEFAULT_BASE_URL).rstrip("/")
    name = model.removeprefix("models/")
    return f"{base}/models/{quote(name, safe='-._~')}:streamGenerateContent?alt=sse"
