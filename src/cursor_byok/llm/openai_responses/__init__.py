"""OpenAI Responses API adapter (`POST {base_url}/responses`, streamed, `store: false`).

Request: the history goes through `transform_messages` with this API's id normalizer, then each
message becomes input items by a function of that message alone, so the bytes of an older item
never change as the conversation grows (OpenAI's prefix cache keys on them; `prompt_cache_key`
and the `session_id` header pin the conversation to one cache shard).

Stream: `response.*` events drive a `MessageAssembler`; blocks are routed by `output_index`
(falling back to `item_id`), never by the provider's positions in our content.

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

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .. import context_errors
from ..assembler import MessageAssembler
from ..events import ErrorKind, ResponseEvent
from ..http import HttpAdapter
from ..prefix_memo import PrefixMemo, fold_history
from ..settings import ModelSettings, ProviderSettings
from ..sse import SSEEvent
from ..stream import PreparedRequest
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
    Usage,
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
SUMMARY_SEPARATOR = "\n\n"
TEXT_SIGNATURE_VERSION = 1
IMAGE_DETAIL = "auto"
# Output items a client must execute; see the module docstring.
CLIENT_EXECUTED_ITEMS = frozenset(
    {
        "custom_tool_call",
        "apply_patch_call",
        "shell_call",
        "local_shell_call",
        "computer_call",
        "mcp_approval_request",
    }
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class _RawItem(msgspec.Struct):
    """Slices the `item` of an event out of the data text without re-encoding it."""

    item: msgspec.Raw = msgspec.Raw()


_raw_item_decoder = msgspec.json.Decoder(_RawItem)


def _short_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    return digest[:SHORT_HASH_LEN]


# -- request ----------------------------------------------------------------------------------


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

    __slots__ = ("items", "transform")

    def __init__(self, target: Target) -> None:
        self.transform = HistoryTransform(target, normalize_tool_call_id)
        self.items: list[Any] = []

    def copy(self) -> ResponsesHistory:
        other = ResponsesHistory.__new__(ResponsesHistory)
        other.transform = self.transform.copy()
        other.items = list(self.items)
        return other

    def feed(self, message: Message) -> None:
        for m in self.transform.feed(message):
            self.items.extend(message_items(m, self.transform.target))

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
    target = Target(api=API, provider=provider, model=settings.model)
    items: list[Any] = []
    if request.system_prompt:
        items.append(system_item(request.system_prompt, settings.reasoning))
    history = fold_history(request.messages, target, lambda: ResponsesHistory(target), memo)
    items.extend(history.converted())
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


# -- stream -----------------------------------------------------------------------------------

_Kind = Literal["thinking", "text", "toolCall"]


@dataclass(slots=True)
class _Item:
    """One provider output item that became a native content block."""

    kind: _Kind
    index: int  # native content index
    item_id: str
    phase: str | None = None
    separator_pending: bool = False


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def parse_usage(raw: Any) -> Usage | None:
    """`input` excludes cached tokens, which OpenAI counts inside `input_tokens`."""
    if not isinstance(raw, dict):
        return None
    cached = _int(_dict(raw.get("input_tokens_details")).get("cached_tokens"))
    return Usage(
        input=max(0, _int(raw.get("input_tokens")) - cached),
        output=_int(raw.get("output_tokens")),
        cache_read=cached,
        reasoning=_int(_dict(raw.get("output_tokens_details")).get("reasoning_tokens")),
    )


def _text_signature_json(item_id: str, phase: str | None) -> str:
    sig: dict[str, Any] = {"v": TEXT_SIGNATURE_VERSION, "id": item_id}
    if phase:
        sig["phase"] = phase
    return _encoder.encode(sig).decode()


_Handler = Callable[[dict[str, Any], str], list[ResponseEvent]]


class ResponsesDecoder:
    """Responses SSE -> native events. Sans-I/O; raises on undecodable JSON (the runtime turns
    that into an `error`), ignores event types it does not know."""

    def __init__(
        self, assembler: MessageAssembler, redact: Callable[[str], str] | None = None
    ) -> None:
        self._asm = assembler
        self._redact = redact or (lambda text: text)
        self._by_output: dict[int, _Item] = {}
        self._by_id: dict[str, _Item] = {}
        self._refusals: list[str] = []
        self._unsupported: list[str] = []
        self._handlers: dict[str, _Handler] = {
            "response.created": self._on_response,
            "response.in_progress": self._on_response,
            "response.output_item.added": self._on_item_added,
            "response.output_item.done": self._on_item_done,
            "response.reasoning_summary_text.delta": self._on_thinking_delta,
            "response.reasoning_text.delta": self._on_thinking_delta,
            "response.reasoning_summary_part.done": self._on_summary_part_done,
            "response.output_text.delta": self._on_text_delta,
            "response.refusal.delta": self._on_text_delta,
            "response.function_call_arguments.delta": self._on_arguments_delta,
            "response.function_call_arguments.done": self._on_arguments_done,
            "response.completed": self._on_completed,
            "response.incomplete": self._on_incomplete,
            "response.failed": self._on_failed,
            "error": self._on_error,
        }

    # -- StreamDecoder -------------------------------------------------------------------------

    def feed(self, event: SSEEvent) -> list[ResponseEvent]:
        if self._asm.terminated:
            return []
        data = event.data
        payload = _decoder.decode(data)
        if not isinstance(payload, dict):
            raise ValueError(f"expected a JSON object, got {type(payload).__name__}")
        kind = payload.get("type")
        handler = self._handlers.get(kind if isinstance(kind, str) else event.event)
        if handler is None:
            return []
        return handler(payload, data)

    def finish(self) -> list[ResponseEvent]:
        if self._asm.terminated:
            return []
        return [self._fail("the stream ended without response.completed")]

    # -- helpers -----------------------------------------------------------------------------

    def _fail(self, message: str, kind: ErrorKind | None = None) -> ResponseEvent:
        return self._asm.fail(self._redact(message), kind=kind)

    def _find(self, p: dict[str, Any]) -> _Item | None:
        oi = p.get("output_index")
        item = self._by_output.get(oi) if isinstance(oi, int) else None
        if item is None:
            # Servers that omit output_index (llama.cpp) still name the item: `item_id` on
            # deltas, `item.id` on output_item.added/done.
            item_id = p.get("item_id")
            if not isinstance(item_id, str):
                item_id = _dict(p.get("item")).get("id")
            if isinstance(item_id, str):
                item = self._by_id.get(item_id)
        return item

    def _register(self, p: dict[str, Any], item: _Item) -> _Item:
        oi = p.get("output_index")
        if isinstance(oi, int):
            self._by_output[oi] = item
        if item.item_id:
            self._by_id[item.item_id] = item
        return item

    def _open(self, p: dict[str, Any], kind: _Kind, raw: dict[str, Any]) -> tuple[_Item, Any]:
        item_id = _str(raw.get("id")) or _str(p.get("item_id"))
        start: ResponseEvent
        if kind == "thinking":
            index, start = self._asm.open_thinking()
        elif kind == "text":
            index, start = self._asm.open_text()
        else:
            call_id = _str(raw.get("call_id"))
            tool_id = f"{call_id}|{item_id}" if item_id else call_id
            index, start = self._asm.open_tool_call(tool_id, _str(raw.get("name")))
        phase = raw.get("phase")
        state = _Item(kind, index, item_id, phase if isinstance(phase, str) and phase else None)
        return self._register(p, state), start

    def _live(self, p: dict[str, Any], kind: _Kind, out: list[ResponseEvent]) -> _Item | None:
        """The open block an event belongs to; text and thinking open lazily when the provider
        skipped `output_item.added`."""
        item = self._find(p)
        if item is None:
            if kind == "toolCall":
                return None
            item, start = self._open(p, kind, {})
            out.append(start)
        if item.kind != kind or not self._asm.is_open(item.index):
            return None
        return item

    def _extend_to(self, item: _Item, final: str, out: list[ResponseEvent]) -> None:
        """Emit the part of a provider's final text that its deltas did not carry."""
        streamed = self._asm.block_text(item.index)
        if len(final) > len(streamed) and final.startswith(streamed):
            tail = final[len(streamed) :]
            if item.kind == "text":
                out.append(self._asm.text_delta(item.index, tail))
            elif item.kind == "thinking":
                out.append(self._asm.thinking_delta(item.index, tail))
            else:
                out.append(self._asm.tool_call_delta(item.index, tail))

    def _apply_response(self, response: dict[str, Any]) -> None:
        self._asm.set_response_id(_str(response.get("id")) or None)
        self._asm.set_response_model(_str(response.get("model")) or None)
        usage = parse_usage(response.get("usage"))
        if usage is not None:
            self._asm.set_usage(usage)

    # -- handlers ----------------------------------------------------------------------------

    def _on_response(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        self._apply_response(_dict(p.get("response")))
        return []

    def _on_item_added(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        raw = _dict(p.get("item"))
        kind = raw.get("type")
        out: list[ResponseEvent] = []
        if kind == "reasoning":
            out.append(self._open(p, "thinking", raw)[1])
        elif kind == "message":
            out.append(self._open(p, "text", raw)[1])
        elif kind == "function_call":
            item, start = self._open(p, "toolCall", raw)
            out.append(start)
            arguments = _str(raw.get("arguments"))
            if arguments:
                out.append(self._asm.tool_call_delta(item.index, arguments))
        elif kind in CLIENT_EXECUTED_ITEMS:
            self._unsupported.append(f"{kind} {_str(raw.get('name'))}".rstrip())
        return out

    def _on_thinking_delta(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        delta = p.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        out: list[ResponseEvent] = []
        item = self._live(p, "thinking", out)
        if item is None:
            return out
        if item.separator_pending:
            item.separator_pending = False
            out.append(self._asm.thinking_delta(item.index, SUMMARY_SEPARATOR))
        out.append(self._asm.thinking_delta(item.index, delta))
        return out

    def _on_summary_part_done(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        item = self._find(p)
        if item is not None and item.kind == "thinking":
            item.separator_pending = True
        return []

    def _on_text_delta(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        delta = p.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        out: list[ResponseEvent] = []
        item = self._live(p, "text", out)
        if item is not None:
            out.append(self._asm.text_delta(item.index, delta))
        return out

    def _on_arguments_delta(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        delta = p.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        out: list[ResponseEvent] = []
        item = self._live(p, "toolCall", out)
        if item is not None:
            out.append(self._asm.tool_call_delta(item.index, delta))
        return out

    def _on_arguments_done(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        arguments = p.get("arguments")
        out: list[ResponseEvent] = []
        item = self._live(p, "toolCall", out)
        if item is not None and isinstance(arguments, str):
            self._extend_to(item, arguments, out)
        return out

    def _on_item_done(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        raw = _dict(p.get("item"))
        kind = raw.get("type")
        if kind == "reasoning":
            return self._close_reasoning(p, raw, data)
        if kind == "message":
            return self._close_message(p, raw)
        if kind == "function_call":
            return self._close_function_call(p, raw)
        return []

    def _close_reasoning(self, p: dict[str, Any], raw: dict[str, Any], data: str) -> list[Any]:
        out: list[Any] = []
        item = self._find(p)
        if item is None:
            item, start = self._open(p, "thinking", raw)
            out.append(start)
        if item.kind != "thinking" or not self._asm.is_open(item.index):
            return out
        summary = [_str(_dict(s).get("text")) for s in raw.get("summary") or () if s]
        text = SUMMARY_SEPARATOR.join(t for t in summary if t)
        if not text and not self._asm.block_text(item.index):
            content = [_str(_dict(c).get("text")) for c in raw.get("content") or () if c]
            text = SUMMARY_SEPARATOR.join(t for t in content if t)
        if text:
            self._extend_to(item, text, out)
        signature = bytes(_raw_item_decoder.decode(data).item).decode()
        out.append(
            self._asm.close_thinking(item.index, signature=signature or None, text=text or None)
        )
        return out

    def _close_message(self, p: dict[str, Any], raw: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        item = self._find(p)
        if item is None:
            item, start = self._open(p, "text", raw)
            out.append(start)
        if item.kind != "text" or not self._asm.is_open(item.index):
            return out
        parts: list[str] = []
        for part in raw.get("content") or ():
            part = _dict(part)
            if part.get("type") == "refusal":
                refusal = _str(part.get("refusal"))
                parts.append(refusal)
                self._refusals.append(refusal or "(no refusal text)")
            else:
                parts.append(_str(part.get("text")))
        self._extend_to(item, "".join(parts), out)
        item_id = _str(raw.get("id")) or item.item_id
        phase = raw.get("phase")
        phase = phase if isinstance(phase, str) and phase else item.phase
        signature = _text_signature_json(item_id, phase) if item_id else None
        out.append(self._asm.close_text(item.index, signature=signature))
        return out

    def _close_function_call(self, p: dict[str, Any], raw: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        item = self._find(p)
        if item is None:
            item, start = self._open(p, "toolCall", raw)
            out.append(start)
        if item.kind != "toolCall" or not self._asm.is_open(item.index):
            return out
        arguments = raw.get("arguments")
        if isinstance(arguments, str):
            self._extend_to(item, arguments, out)
        self._asm.set_tool_call_identity(item.index, name=_str(raw.get("name")) or None)
        final = arguments if isinstance(arguments, str) else None
        out.append(self._asm.close_tool_call(item.index, arguments_text=final))
        return out

    def _finish(self, reason: Literal["stop", "length"]) -> list[ResponseEvent]:
        out: list[ResponseEvent] = list(self._asm.close_all())
        if self._refusals:
            out.append(self._fail("refusal: " + "\n".join(self._refusals)))
        elif self._unsupported:
            names = ", ".join(self._unsupported)
            out.append(self._fail(f"the model called a tool this adapter cannot run: {names}"))
        elif reason == "stop" and self._asm.has_tool_calls():
            out.append(self._asm.done("toolUse"))
        else:
            out.append(self._asm.done(reason))
        return out

    def _on_completed(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        response = _dict(p.get("response"))
        status = response.get("status")
        if status == "incomplete":
            return self._on_incomplete(p, data)
        if status in ("failed", "cancelled"):
            return self._on_failed(p, data)
        self._apply_response(response)
        return self._finish("stop")

    def _on_incomplete(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        response = _dict(p.get("response"))
        self._apply_response(response)
        reason = _str(_dict(response.get("incomplete_details")).get("reason"))
        if reason == "content_filter":
            return [self._fail("content_filter: the provider's content filter stopped the output")]
        return self._finish("length")

    def _on_failed(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        response = _dict(p.get("response"))
        self._apply_response(response)
        error = _dict(response.get("error"))
        code, message = _str(error.get("code")), _str(error.get("message"))
        reason = _str(_dict(response.get("incomplete_details")).get("reason"))
        if message:
            text = f"{code}: {message}" if code else message
        elif reason:
            text = f"incomplete: {reason}"
        else:
            text = f"response {_str(response.get('status')) or 'failed'}"
        return [self._fail(text, kind=context_errors.openai_code(code))]

    def _on_error(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        # The documented shape has code/message at the top; some servers nest them in `error`.
        nested = _dict(p.get("error"))
        code = p.get("code") or nested.get("code") or nested.get("type")
        message = _str(p.get("message")) or _str(nested.get("message")) or "unknown error"
        if code is None or code == "":
            return [self._fail(f"Error: {message}")]
        return [self._fail(f"Error Code {code}: {message}")]


# -- adapter ----------------------------------------------------------------------------------


class OpenAIResponsesAdapter(HttpAdapter):
    """`OpenAIResponsesAdapter(ProviderSettings(api="openai-responses", ...))`."""

    api = API

    def __init__(self, provider: ProviderSettings):
        super().__init__(provider)
        self.histories: PrefixMemo[ResponsesHistory] = PrefixMemo()

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        body = build_body(request, settings, self.provider.name, self.histories)
        headers: list[tuple[str, str]] = [
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ]
        if settings.cache_key:
            headers.append(("session_id", settings.cache_key))
        headers.extend(sorted(settings.extra_headers.items()))
        return PreparedRequest(
            url=self.provider.base_url.rstrip("/") + ENDPOINT,
            body=_encoder.encode(body),
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

    def new_decoder(self, assembler: MessageAssembler) -> ResponsesDecoder:
        return ResponsesDecoder(assembler, redact=self.redact)
