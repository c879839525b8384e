"""Anthropic Messages stream decoding: SSE events -> native events (sans I/O).

Provider content indices are mapped to native ones. Server-side tool blocks
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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ..assembler import MessageAssembler
from ..events import ErrorEvent, ResponseEvent
from ..sse import SSEEvent
from ..types import DoneReason, Usage

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
