"""OpenAI Responses request building: native request -> the JSON body of `POST /responses`.

The history goes through `transform_messages` with this API's id normalizer, then each
message becomes input items by a function of that message alone, so the bytes of an older item
never change as the conversation grows (OpenAI's prefix cache keys on them; `prompt_cache_key`
and the `session_id` header pin the conversation to one cache shard).

The decisions the wire leaves open (signatures, ids, reasoning off) are listed in the package
docstring.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from ..append_only import Shared
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
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    UserContent,
)

API = "openai-responses"
ENDPOINT = "/responses"
DEFAULT_REASONING_EFFORT = "medium"
REASONING_SUMMARY = "auto"
REASONING_INCLUDE = "reasoning.encrypted_content"
MAX_CALL_ID_LEN = 64
MAX_ITEM_ID_LEN = 64
SHORT_HASH_LEN = 16
IMAGE_DETAIL = "auto"

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def _short_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    return digest[:SHORT_HASH_LEN]


def _sanitize_call_id(call_id: str) -> str:
    return sanitize_id(call_id, MAX_CALL_ID_LEN).rstrip("_") or "call"


def normalize_tool_call_id(raw: str) -> str:
    """Id of a foreign tool call as Responses accepts it: `call|item` keeps its shape with a
    sanitized call id and a fresh `fc_` item id (a foreign item id is never valid here)."""
    call, sep, item = raw.partition("|")
    call_id = _sanitize_call_id(call)
    if not sep:
        return call_id
    return f"{call_id}|fc_{_short_hash(item)}"


def system_item(prompt: str, reasoning: bool) -> dict[str, Any]:
    """Reasoning models take the system prompt as a `developer` message."""
    return {"role": "developer" if reasoning else "system", "content": strip_surrogates(prompt)}


def _input_part(part: UserContent) -> dict[str, Any]:
    if isinstance(part, TextContent):
        return {"type": "input_text", "text": strip_surrogates(part.text)}
    return {
        "type": "input_image",
        "detail": IMAGE_DETAIL,
        "image_url": f"data:{part.mime_type};base64,{part.data}",
    }


def user_item(content: tuple[UserContent, ...]) -> dict[str, Any]:
    return {"role": "user", "content": [_input_part(p) for p in content]}


def replayable_reasoning(signature: str | None) -> msgspec.Raw | None:
    """The stored reasoning item as raw bytes, or None when it cannot be replayed: not a JSON
    object, or without `encrypted_content` (an id-only item fails under `store: false`)."""
    if not signature:
        return None
    try:
        item = _decoder.decode(signature)
    except msgspec.DecodeError:
        return None
    if not isinstance(item, dict) or item.get("type") != "reasoning":
        return None
    encrypted = item.get("encrypted_content")
    if not isinstance(encrypted, str) or not encrypted:
        return None
    return msgspec.Raw(signature.encode())


def _text_signature(signature: str | None) -> tuple[str | None, str | None]:
    """(message item id, phase) from a text signature; a bare string is a legacy plain id."""
    if not signature:
        return None, None
    if signature.startswith("{"):
        try:
            data = _decoder.decode(signature)
        except msgspec.DecodeError:
            return None, None
        if not isinstance(data, dict):
            return None, None
        item_id, phase = data.get("id"), data.get("phase")
        return (
            item_id if isinstance(item_id, str) and item_id else None,
            phase if isinstance(phase, str) and phase else None,
        )
    return signature, None


def assistant_text_item(block: TextContent, *, keep_item_id: bool = True) -> dict[str, Any]:
    item_id, phase = _text_signature(block.signature)
    item: dict[str, Any] = {"type": "message", "role": "assistant", "status": "completed"}
    if item_id is not None and keep_item_id:
        item["id"] = item_id if len(item_id) <= MAX_ITEM_ID_LEN else f"msg_{_short_hash(item_id)}"
    item["content"] = [
        {"type": "output_text", "text": strip_surrogates(block.text), "annotations": []}
    ]
    if phase is not None:
        item["phase"] = phase
    return item


def _arguments_text(call: ToolCall) -> str:
    """Replay what the model produced: its raw text when that was not a JSON object."""
    if call.arguments_error is not None and call.raw_arguments is not None:
        return strip_surrogates(call.raw_arguments)
    return _encoder.encode(call.arguments).decode()


def function_call_item(call: ToolCall, *, keep_item_id: bool) -> dict[str, Any]:
    call_id, _, item_id = call.id.partition("|")
    item: dict[str, Any] = {"type": "function_call"}
    if keep_item_id and item_id:
        item["id"] = item_id
    item["call_id"] = call_id
    item["name"] = call.name
    item["arguments"] = _arguments_text(call)
    return item


def assistant_items(message: AssistantMessage, target: Target) -> list[Any]:
    """Reasoning items verbatim (same model only), then message and function_call items in
    content order, as the model produced them.

    OpenAI checks that an `fc_`/`msg_` item follows the reasoning item it was produced with, so
    item ids are left out when that reasoning is not replayed: for another model of this
    provider+API, and for a turn whose reasoning we cannot replay (no encrypted content)."""
    same_model = target.produced(message)
    same_api = message.provider == target.provider and message.api == target.api
    reasoning: list[Any] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            reasoning.append(replayable_reasoning(block.signature) if same_model else None)
    keep_ids = (same_model and None not in reasoning) or not same_api
    items: list[Any] = []
    replay = iter(reasoning)
    for block in message.content:
        if isinstance(block, ThinkingContent):
            raw = next(replay)
            if raw is not None:
                items.append(raw)
        elif isinstance(block, TextContent):
            items.append(assistant_text_item(block, keep_item_id=keep_ids))
        else:
            items.append(function_call_item(block, keep_item_id=keep_ids))
    return items


def tool_result_item(message: ToolResultMessage) -> dict[str, Any]:
    call_id = message.tool_call_id.partition("|")[0]
    output: str | list[dict[str, Any]]
    if any(isinstance(p, ImageContent) for p in message.content):
        output = [_input_part(p) for p in message.content]
    else:
        output = strip_surrogates(message.text)
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def message_items(message: Message, target: Target) -> list[Any]:
    if isinstance(message, AssistantMessage):
        return assistant_items(message, target)
    if isinstance(message, ToolResultMessage):
        return [tool_result_item(message)]
    return [user_item(message.content)]


def tool_item(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": strip_surrogates(tool.description),
        "parameters": tool.parameters,
        "strict": False,
    }


class ResponsesHistory:
    """`transform_messages` then `message_items`, one native message at a time: the fold a
    longer history of the same conversation resumes from (prefix_memo.py). The items it
    built are shared by later requests and never changed."""

    __slots__ = ("encoded", "items", "transform")

    def __init__(self, target: Target) -> None:
        self.transform = HistoryTransform(target, normalize_tool_call_id)
        self.items: Shared[Any] = Shared()  # shared by copies
        self.encoded = EncodedItems()  # items[i] as JSON, encoded once (encode_body)

    def copy(self) -> ResponsesHistory:
        other = ResponsesHistory.__new__(ResponsesHistory)
        other.transform = self.transform.copy()
        other.items = self.items.copy()
        other.encoded = self.encoded.copy()
        return other

    def feed(self, message: Message) -> None:
        for m in self.transform.feed(message):
            self.items.extend(message_items(m, self.transform.target))
        self.encoded.sync(self.items)

    def finish(self) -> list[Any]:
        target = self.transform.target
        return [item for m in self.transform.finish() for item in message_items(m, target)]

    def converted(self) -> list[Any]:
        """The whole history as input items: what was built, then what the end adds."""
        return [*self.items, *self.finish()]


def build_body(
    request: RequestMessages,
    settings: ModelSettings,
    provider: str,
    memo: PrefixMemo[ResponsesHistory] | None = None,
) -> dict[str, Any]:
    """The request body in its fixed key order; `extra_body` keys go last, sorted, and replace
    (not deep-merge) a key of the same name. With `memo`, the history's conversion continues
    from the conversation's previous call."""
    history = _history(request, settings, provider, memo)
    items: list[Any] = []
    if request.system_prompt:
        items.append(system_item(request.system_prompt, settings.reasoning))
    items.extend(history.converted())
    return _body(request, settings, items)


def encode_body(
    request: RequestMessages,
    settings: ModelSettings,
    provider: str,
    memo: PrefixMemo[ResponsesHistory] | None = None,
) -> bytes:
    """`build_body` as JSON, byte for byte, without encoding the history again: each item was
    encoded once when the fold built it (encoded_items.py)."""
    history = _history(request, settings, provider, memo)
    pieces: list[bytes] = []
    if request.system_prompt:
        pieces.append(_encoder.encode(system_item(request.system_prompt, settings.reasoning)))
    pieces.extend(history.encoded.runs())
    pieces.extend(_encoder.encode(item) for item in history.finish())
    body = splice(_encoder, _body(request, settings, PLACEHOLDER), "input", pieces)
    return body if body is not None else _encoder.encode(build_body(request, settings, provider))


def _history(
    request: RequestMessages,
    settings: ModelSettings,
    provider: str,
    memo: PrefixMemo[ResponsesHistory] | None,
) -> ResponsesHistory:
    target = Target(api=API, provider=provider, model=settings.model)
    return fold_history(request.messages, target, lambda: ResponsesHistory(target), memo)


def _body(request: RequestMessages, settings: ModelSettings, items: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": settings.model, "input": items, "stream": True, "store": False}
    if settings.cache_key:
        body["prompt_cache_key"] = settings.cache_key
    if settings.max_output_tokens is not None:
        body["max_output_tokens"] = settings.max_output_tokens
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    if settings.reasoning:
        effort = settings.reasoning_effort or DEFAULT_REASONING_EFFORT
        body["reasoning"] = {"effort": effort, "summary": REASONING_SUMMARY}
        body["include"] = [REASONING_INCLUDE]
    if request.tools:
        body["tools"] = [tool_item(t) for t in request.tools]
    for key in sorted(settings.extra_body):
        body.pop(key, None)
        body[key] = settings.extra_body[key]
    return body
