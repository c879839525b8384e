"""OpenAI Responses stream decoding: `ResponsesDecoder`, SSE events -> native events (sans I/O).

`response.*` events drive a `MessageAssembler`; blocks are routed by `output_index`
(falling back to `item_id`), never by the provider's positions in our content.

The decisions the wire leaves open (signatures, summaries, refusals, incomplete responses,
items run by the provider or the client) are listed in the package docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .. import context_errors
from ..assembler import MessageAssembler
from ..events import ContextLimit, ErrorKind, ResponseEvent
from ..sse import SSEEvent
from ..types import Usage

SUMMARY_SEPARATOR = "\n\n"
TEXT_SIGNATURE_VERSION = 1
# Output items a client must execute; see the package docstring.
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

    def _fail(
        self,
        message: str,
        kind: ErrorKind | None = None,
        context_limit: ContextLimit | None = None,
    ) -> ResponseEvent:
        return self._asm.fail(self._redact(message), kind=kind, context_limit=context_limit)

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
        kind = context_errors.openai_code(code)
        limit = context_errors.openai_limit_text(message) if kind is not None else None
        return [self._fail(text, kind=kind, context_limit=limit)]

    def _on_error(self, p: dict[str, Any], data: str) -> list[ResponseEvent]:
        # The documented shape has code/message at the top; some servers nest them in `error`.
        nested = _dict(p.get("error"))
        code = p.get("code") or nested.get("code") or nested.get("type")
        message = _str(p.get("message")) or _str(nested.get("message")) or "unknown error"
        if code is None or code == "":
            return [self._fail(f"Error: {message}")]
        return [self._fail(f"Error Code {code}: {message}")]
