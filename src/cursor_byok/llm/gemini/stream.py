"""Gemini stream decoding: `GeminiDecoder`, SSE chunks -> native events (sans I/O).

Every SSE `data` is one `GenerateContentResponse` chunk; only `candidates[0]` is read.
Text and thought parts open a block when the part kind switches, function calls are emitted
start/delta/end, and `usageMetadata` (repeated on every chunk) replaces the usage each time.
Gemini has no end marker: a response is complete when a chunk carried a `finishReason` and the
HTTP body then ended, so `done` is returned from `finish()`; EOF without a finishReason is an
error. Streamed arguments are assembled by `arguments.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from ..assembler import MessageAssembler
from ..events import ResponseEvent
from ..sse import SSEEvent
from ..types import Usage
from .arguments import ArgumentsWriter, JsonPath, PathError, assign_path, parse_json_path
from .request import Json, generated_tool_call_id

FINISH_STOP = "STOP"
FINISH_LENGTH = "MAX_TOKENS"

_USAGE_KEYS = frozenset(
    {
        "promptTokenCount",
        "candidatesTokenCount",
        "thoughtsTokenCount",
        "cachedContentTokenCount",
        "toolUsePromptTokenCount",
        "totalTokenCount",
    }
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def error_text(data: Any) -> str | None:
    """`status: message` of a Google error object (`{"error": {...}}`, possibly in a list)."""
    if isinstance(data, list) and data:
        data = data[0]
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, str):
        return err or None
    if not isinstance(err, dict):
        return None
    message = err.get("message")
    kind = err.get("status") or err.get("code")
    text = str(message) if message else "(no message)"
    if kind:
        text = f"{kind}: {text}"
    details = err.get("details")
    if isinstance(details, list):
        for detail in details:
            if isinstance(detail, dict) and isinstance(detail.get("retryDelay"), str):
                text += f" (retry in {detail['retryDelay']})"
                break
    return text


@dataclass(slots=True)
class _StreamedCall:
    """A function call whose arguments arrive as `partialArgs` over several parts."""

    index: int
    signature: str | None
    args: Json = field(default_factory=dict)
    writer: ArgumentsWriter = field(default_factory=ArgumentsWriter)
    continuing: JsonPath | None = None  # path of a string fragment that said willContinue
    fragments: list[Any] = field(default_factory=list)
    error: str | None = None


BlockKind = Literal["text", "thinking"]
Redactor = Callable[[str], str]


class GeminiDecoder:
    """Sans-I/O: Gemini SSE chunks -> native events through the assembler."""

    def __init__(self, assembler: MessageAssembler, redact: Redactor | None = None) -> None:
        self._asm = assembler
        self._redact: Redactor = redact or (lambda text: text)
        self._block: int | None = None
        self._block_kind: BlockKind | None = None
        self._call: _StreamedCall | None = None
        self._calls = 0
        self._seen_ids: set[str] = set()
        self._finish_reason: str | None = None

    # -- entry points --------------------------------------------------------------------

    def feed(self, event: SSEEvent) -> list[ResponseEvent]:
        data = event.data
        if not data or data.isspace():
            return []
        payload = _decoder.decode(data)  # malformed JSON raises; the runtime reports it
        out: list[ResponseEvent] = []
        for chunk in payload if isinstance(payload, list) else (payload,):
            if isinstance(chunk, dict):
                self._chunk(chunk, out)
            if self._asm.terminated:
                break
        return out

    def finish(self) -> list[ResponseEvent]:
        """The body ended: success only if a finishReason was seen."""
        asm = self._asm
        if asm.terminated:
            return []
        if self._finish_reason is None:
            return [self._fail("Gemini stream ended without a finishReason (truncated response)")]
        out: list[ResponseEvent] = []
        self._close_current(out)
        out.extend(asm.close_all())
        if self._finish_reason == FINISH_LENGTH:
            out.append(asm.done("length"))
        else:
            out.append(asm.done("toolUse" if asm.has_tool_calls() else "stop"))
        return out

    # -- chunks --------------------------------------------------------------------------

    def _chunk(self, chunk: Json, out: list[ResponseEvent]) -> None:
        asm = self._asm
        if chunk.get("error"):
            out.append(self._fail(f"Gemini stream error: {error_text(chunk) or 'unknown'}"))
            return
        response_id = chunk.get("responseId")
        if isinstance(response_id, str):
            asm.set_response_id(response_id)
        model = chunk.get("modelVersion")
        if isinstance(model, str):
            asm.set_response_model(model)
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            self._usage(usage)
        feedback = chunk.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            text = f"Gemini blocked the prompt: {feedback['blockReason']}"
            if feedback.get("blockReasonMessage"):
                text += f": {feedback['blockReasonMessage']}"
            out.append(self._fail(text))
            return
        candidates = chunk.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            return
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            return
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict):
                    self._part(part, out)
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            self._finish(reason, candidate, out)

    def _usage(self, usage: Json) -> None:
        if _USAGE_KEYS.isdisjoint(usage):
            return  # e.g. only `trafficType`: not a usage report

        def count(key: str) -> int:
            value = usage.get(key)
            return value if isinstance(value, int) else 0

        cached = count("cachedContentTokenCount")
        thoughts = count("thoughtsTokenCount")
        # Tool-use prompt tokens (search grounding) are billed as input; with them the native
        # total equals `totalTokenCount`.
        prompt = count("promptTokenCount") + count("toolUsePromptTokenCount")
        self._asm.set_usage(
            Usage(
                input=max(0, prompt - cached),
                output=count("candidatesTokenCount") + thoughts,
                cache_read=cached,
                reasoning=thoughts,
            )
        )

    def _finish(self, reason: str, candidate: Json, out: list[ResponseEvent]) -> None:
        if reason == FINISH_LENGTH and self._call is not None:
            # Cut mid-arguments: report it rather than hand a half-built object to the tool.
            self._call.error = self._call.error or "arguments cut off by MAX_TOKENS"
        self._close_current(out)
        if reason in (FINISH_STOP, FINISH_LENGTH):
            self._finish_reason = reason
            return
        text = f"Gemini stopped with finishReason {reason}"
        message = candidate.get("finishMessage")
        if isinstance(message, str) and message:
            text += f": {message}"
        out.append(self._fail(text))

    def _fail(self, text: str) -> ResponseEvent:
        return self._asm.fail(self._redact(text))

    # -- parts ---------------------------------------------------------------------------

    def _part(self, part: Json, out: list[ResponseEvent]) -> None:
        raw_signature = part.get("thoughtSignature")
        signature = raw_signature if isinstance(raw_signature, str) and raw_signature else None
        call = part.get("functionCall")
        if isinstance(call, dict):
            self._function_call(call, signature, out)
            return
        text = part.get("text")
        if isinstance(text, str):
            self._text(text, "thinking" if part.get("thought") is True else "text", signature, out)
        # Other part kinds (executableCode, inlineData, ...) carry nothing the native model holds.

    def _text(
        self, text: str, kind: BlockKind, signature: str | None, out: list[ResponseEvent]
    ) -> None:
        if not text and signature is None:
            return  # Gemini ends many responses with an empty text part
        asm = self._asm
        if self._call is not None or self._block is None or self._block_kind != kind:
            self._close_current(out)
            if kind == "text":
                self._block, text_start = asm.open_text()
                out.append(text_start)
            else:
                self._block, thinking_start = asm.open_thinking()
                out.append(thinking_start)
            self._block_kind = kind
        index = self._block
        assert index is not None
        if text:
            if kind == "text":
                out.append(asm.text_delta(index, text))
            else:
                out.append(asm.thinking_delta(index, text))
        if signature is not None:
            asm.set_signature(index, signature)  # the last non-empty one wins

    def _close_current(self, out: list[ResponseEvent]) -> None:
        if self._call is not None:
            self._end_streamed_call(out)
        if self._block is not None:
            if self._asm.is_open(self._block):
                if self._block_kind == "text":
                    out.append(self._asm.close_text(self._block))
                else:
                    out.append(self._asm.close_thinking(self._block))
            self._block = None
            self._block_kind = None

    def _new_call_id(self, call: Json, name: str) -> str:
        given = call.get("id")
        n = self._calls
        self._calls += 1
        if isinstance(given, str) and given and given not in self._seen_ids:
            call_id = given
        else:
            call_id = generated_tool_call_id(name, self._asm.response_id, n)
        self._seen_ids.add(call_id)
        return call_id

    def _function_call(self, call: Json, signature: str | None, out: list[ResponseEvent]) -> None:
        asm = self._asm
        name = call.get("name")
        partial = call.get("partialArgs")
        more = call.get("willContinue") is True
        if isinstance(name, str) and name:
            self._close_current(out)
            call_id = self._new_call_id(call, name)
            index, start = asm.open_tool_call(call_id, name, thought_signature=signature)
            out.append(start)
            args = call.get("args")
            if more or isinstance(partial, list):
                fresh = _StreamedCall(index=index, signature=signature)
                self._call = fresh
                if isinstance(args, dict):
                    for key, value in args.items():
                        self._apply(fresh, (key,), value, is_string=False, more=False, out=out)
                self._partial_args(fresh, partial, out)
                if not more:
                    self._end_streamed_call(out)
                return
            self._complete_call(index, args, signature, out)
            return
        streamed = self._call
        if streamed is None:
            if isinstance(partial, list) and partial:
                raise ValueError("Gemini sent partialArgs without a function call in progress")
            return  # a stray end marker `{}`
        if signature is not None:
            streamed.signature = signature
        self._partial_args(streamed, partial, out)
        if not more:
            self._end_streamed_call(out)

    def _complete_call(
        self, index: int, args: Any, signature: str | None, out: list[ResponseEvent]
    ) -> None:
        asm = self._asm
        if args is None:
            args = {}
        if isinstance(args, dict):
            out.append(asm.tool_call_delta(index, _encoder.encode(args).decode()))
            out.append(asm.close_tool_call(index, arguments=args, thought_signature=signature))
        else:
            # Not an object (a proxy may send a JSON string): the assembler reports it and keeps
            # the raw text instead of running the tool with `{}`.
            raw = args if isinstance(args, str) else _encoder.encode(args).decode()
            out.append(asm.tool_call_delta(index, raw))
            out.append(asm.close_tool_call(index, arguments_text=raw, thought_signature=signature))

    def _partial_args(
        self, streamed: _StreamedCall, partial: Any, out: list[ResponseEvent]
    ) -> None:
        if not isinstance(partial, list):
            return
        for fragment in partial:
            if not isinstance(fragment, dict):
                continue
            streamed.fragments.append(fragment)
            if "stringValue" in fragment:
                value: Any = fragment["stringValue"]
                is_string = True
            elif "numberValue" in fragment:
                value, is_string = fragment["numberValue"], False
            elif "boolValue" in fragment:
                value, is_string = fragment["boolValue"], False
            elif "nullValue" in fragment:
                value, is_string = None, False
            else:
                continue  # no value: a bare continuation marker
            raw_path = fragment.get("jsonPath")
            if not isinstance(raw_path, str):
                streamed.error = streamed.error or "a partialArgs fragment has no jsonPath"
                continue
            try:
                path = parse_json_path(raw_path)
            except PathError as exc:
                streamed.error = streamed.error or str(exc)
                continue
            more = fragment.get("willContinue") is True and is_string
            self._apply(streamed, path, value, is_string=is_string, more=more, out=out)

    def _apply(
        self,
        streamed: _StreamedCall,
        path: JsonPath,
        value: Any,
        *,
        is_string: bool,
        more: bool,
        out: list[ResponseEvent],
    ) -> None:
        append = is_string and streamed.continuing == path
        streamed.continuing = path if more else None
        try:
            assign_path(streamed.args, path, value, append=append)
        except PathError as exc:
            streamed.error = streamed.error or str(exc)
            return
        delta = streamed.writer.feed(path, value, is_string=is_string, more=more)
        if delta:
            out.append(self._asm.tool_call_delta(streamed.index, delta))

    def _end_streamed_call(self, out: list[ResponseEvent]) -> None:
        streamed = self._call
        assert streamed is not None
        self._call = None
        asm = self._asm
        tail = streamed.writer.close()
        if tail:
            out.append(asm.tool_call_delta(streamed.index, tail))
        if streamed.error is None:
            end = asm.close_tool_call(
                streamed.index, arguments=streamed.args, thought_signature=streamed.signature
            )
        else:
            # Report instead of guessing: the raw fragments are kept as the (invalid) raw text.
            raw = (
                f"partialArgs could not be assembled ({streamed.error}): "
                + _encoder.encode(streamed.fragments).decode()
            )
            end = asm.close_tool_call(
                streamed.index, arguments_text=raw, thought_signature=streamed.signature
            )
        out.append(end)
