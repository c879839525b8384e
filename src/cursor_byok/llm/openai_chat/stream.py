"""OpenAI Chat Completions stream decoding: `ChatDecoder`, SSE chunks -> native events through
the `MessageAssembler` (sans I/O).

Only choice index 0 is read (`n > 1` streams interleave choices; the others are
dropped). Text that arrives after a tool call is appended to the message's one text block (its
content index stays the old one), so a Chat message has at most one text and one thinking block.
All blocks close at the end of the stream, in content order. A model that ends with
finish_reason `stop` while it made tool calls (Ollama, some vLLM parsers) is reported as
`toolUse`, since the calls need results.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from ..assembler import MessageAssembler
from ..events import ResponseEvent
from ..sse import SSEEvent
from ..types import DoneReason, Usage
from .request import REASONING_FIELDS

DONE_MARKER = "[DONE]"
FINISH_REASONS: dict[str, DoneReason] = {
    "stop": "stop",
    "end": "stop",
    "length": "length",
    "tool_calls": "toolUse",
    "function_call": "toolUse",
}

_encode = msgspec.json.encode
_decode = msgspec.json.decode
_UNSEEN: Any = object()


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_usage(usage: dict[str, Any], chunk: dict[str, Any]) -> Usage:
    """Chat usage normalized: `input` excludes cache reads (OpenAI `cached_tokens`, DeepSeek
    `prompt_cache_hit_tokens`) and writes (OpenRouter `cache_write_tokens`)."""
    prompt_details = _dict(usage.get("prompt_tokens_details"))
    cached = prompt_details.get("cached_tokens")
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens", chunk.get("prompt_cache_hit_tokens"))
    cache_read = _int(cached)
    cache_write = _int(prompt_details.get("cache_write_tokens"))
    prompt = _int(usage.get("prompt_tokens"))
    return Usage(
        input=max(0, prompt - cache_read - cache_write),
        output=_int(usage.get("completion_tokens")),
        cache_read=cache_read,
        cache_write=cache_write,
        reasoning=_int(_dict(usage.get("completion_tokens_details")).get("reasoning_tokens")),
    )


def parse_timings(timings: dict[str, Any]) -> Usage:
    """llama.cpp's `timings` (on every chunk when a request asks `timings_per_token`, else on
    the last): the prompt evaluated, the prompt reused from its cache, the tokens generated so
    far. What a call canceled mid-answer is counted by when no usage chunk came."""
    return Usage(
        input=_int(timings.get("prompt_n")),
        output=_int(timings.get("predicted_n")),
        cache_read=_int(timings.get("cache_n")),
    )


def _in_band_error(error: Any) -> str:
    """OpenRouter's mid-stream `error` object: message, code and the upstream's raw text."""
    if not isinstance(error, dict):
        return f"provider error: {error}"
    message = error.get("message")
    text = message if isinstance(message, str) and message else "provider error"
    code = error.get("code")
    if isinstance(code, str | int) and not isinstance(code, bool) and code != "":
        text = f"{code}: {text}"
    raw = _dict(error.get("metadata")).get("raw")
    if raw:
        text += f" ({raw if isinstance(raw, str) else _encode(raw).decode()})"
    return text


def _error_event_text(data: str) -> str:
    try:
        payload = _decode(data)
    except msgspec.DecodeError:
        return f"provider error: {data[:2000]}"
    if isinstance(payload, dict) and "error" in payload:
        return _in_band_error(payload["error"])
    return _in_band_error(payload)


class ChatDecoder:
    """Sans-I/O: Chat Completions chunks -> native events.

    The terminal event is emitted when the stream ends ([DONE] or EOF) after a finish_reason
    was seen, never on the finish_reason chunk itself: usage arrives in a later chunk.
    """

    def __init__(self, assembler: MessageAssembler, redact: Callable[[str], str] = str) -> None:
        self._asm = assembler
        self._redact = redact
        self._text: int | None = None
        self._thinking: int | None = None
        self._by_index: dict[int, int] = {}  # provider tool index -> content index
        self._by_id: dict[str, int] = {}  # tool call id -> content index
        self._last_tool: int | None = None
        self._tools: list[int] = []
        self._encrypted: dict[str, str] = {}  # tool call id -> reasoning_details entry (JSON)
        self._refusal: list[str] = []
        self._finish: str | None = None
        self._ended = False
        # The `id` and `model` of the last chunk the general path read: a chunk with the same
        # ones has nothing new for the assembler there.
        self._seen_id: Any = _UNSEEN
        self._seen_model: Any = _UNSEEN

    def feed(self, event: SSEEvent) -> list[ResponseEvent]:
        if self._ended:
            return []
        data = event.data.strip()
        if not data:
            return []
        if data == DONE_MARKER:
            return self._end()
        if event.event == "error":  # some compatible servers name their error events
            self._ended = True
            return [self._asm.fail(self._redact(_error_event_text(data)))]
        chunk = _decode(data)  # malformed JSON raises: the runtime turns it into an error
        if not isinstance(chunk, dict):
            return []
        # The common chunk, most of a stream: choice 0 first, its delta a piece of the text
        # already open, nothing else new (no usage, no finish_reason, the same id and model).
        # It takes the short way; anything else the general one below.
        choices = chunk.get("choices")
        if (
            self._text is not None
            and type(choices) is list
            and choices
            and type(choice := choices[0]) is dict
            and type(delta := choice.get("delta")) is dict
            and len(delta) == 1
            and type(content := delta.get("content")) is str
            and content
            and choice.get("finish_reason") is None
            and choice.get("index") in (0, None)
            and chunk.get("id") == self._seen_id
            and chunk.get("model") == self._seen_model
            and chunk.get("usage") is None
            and choice.get("usage") is None
            and chunk.get("timings") is None
            and chunk.get("error") is None
        ):
            return [self._asm.text_delta(self._text, content)]
        asm = self._asm
        out: list[ResponseEvent] = []
        if "error" in chunk and chunk["error"] is not None:
            self._ended = True
            return [asm.fail(self._redact(_in_band_error(chunk["error"])))]
        response_id = self._seen_id = chunk.get("id")
        if isinstance(response_id, str):
            asm.set_response_id(response_id)
        model = self._seen_model = chunk.get("model")
        if isinstance(model, str):
            asm.set_response_model(model)
        choice = self._choice(chunk.get("choices"))
        usage = chunk.get("usage")
        if not isinstance(usage, dict) and choice is not None:
            usage = choice.get("usage")  # Moonshot
        if isinstance(usage, dict):
            asm.set_usage(parse_usage(usage, chunk))
        elif isinstance(timings := chunk.get("timings"), dict):  # llama.cpp: usage as it streams
            asm.set_usage(parse_timings(timings))
        if choice is None:
            return out
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self._delta(delta, out)
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self._finish = finish
        return out

    def finish(self) -> list[ResponseEvent]:
        return [] if self._ended else self._end()

    # -- internals -------------------------------------------------------------------------

    @staticmethod
    def _choice(choices: Any) -> dict[str, Any] | None:
        if not isinstance(choices, list):
            return None
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index") in (0, None):
                return choice
        return None

    def _delta(self, delta: dict[str, Any], out: list[ResponseEvent]) -> None:
        asm = self._asm
        for field in REASONING_FIELDS:
            text = delta.get(field)
            if isinstance(text, str) and text:
                if self._thinking is None:
                    self._thinking, thinking_start = asm.open_thinking(signature=field)
                    out.append(thinking_start)
                out.append(asm.thinking_delta(self._thinking, text))
                break
        content = delta.get("content")
        if isinstance(content, list):  # a few servers (Mistral) send a list of parts
            content = "".join(
                p["text"]
                for p in content
                if isinstance(p, dict)
                and p.get("type") == "text"
                and isinstance(p.get("text"), str)
            )
        if isinstance(content, str) and content:
            if self._text is None:
                self._text, text_start = asm.open_text()
                out.append(text_start)
            out.append(asm.text_delta(self._text, content))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusal.append(refusal)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for fragment in tool_calls:
                if isinstance(fragment, dict):
                    self._tool_fragment(fragment, out)
        details = delta.get("reasoning_details")
        if isinstance(details, list):
            for entry in details:
                if (
                    isinstance(entry, dict)
                    and entry.get("type") == "reasoning.encrypted"
                    and isinstance(entry.get("id"), str)
                    and entry["id"]
                ):
                    self._encrypted[entry["id"]] = _encode(entry).decode()

    def _tool_fragment(self, fragment: dict[str, Any], out: list[ResponseEvent]) -> None:
        asm = self._asm
        raw_index = fragment.get("index")
        index = (
            raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) else None
        )
        raw_id = fragment.get("id")
        call_id = raw_id if isinstance(raw_id, str) and raw_id else None
        function = _dict(fragment.get("function"))
        raw_name = function.get("name")
        name = raw_name if isinstance(raw_name, str) and raw_name else None
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a few servers send the object itself
            arguments = _encode(arguments).decode()

        ci: int | None = None
        if index is not None and index in self._by_index:
            ci = self._by_index[index]
            known = asm.tool_call_id(ci)
            if call_id and known and call_id != known:
                ci = None  # a new id on an occupied index is a new call (Ollama, LiteLLM)
        elif call_id is not None and call_id in self._by_id:
            ci = self._by_id[call_id]
        elif index is None and call_id is None:
            ci = self._last_tool
        if ci is None:
            ci, start = asm.open_tool_call(call_id or "", name or "")
            out.append(start)
            self._tools.append(ci)
        else:
            asm.set_tool_call_identity(ci, tool_call_id=call_id, name=name)
        if index is not None:
            self._by_index[index] = ci
        if call_id is not None:
            self._by_id[call_id] = ci
        self._last_tool = ci
        if isinstance(arguments, str) and arguments:
            out.append(asm.tool_call_delta(ci, arguments))

    def _end(self) -> list[ResponseEvent]:
        self._ended = True
        asm = self._asm
        if self._refusal:
            return [asm.fail(self._redact("refusal: " + "".join(self._refusal)))]
        if self._finish is None:
            return [asm.fail("stream ended without finish_reason")]
        reason = FINISH_REASONS.get(self._finish)
        if reason is None:
            return [asm.fail(self._redact(f"Provider finish_reason: {self._finish}"))]
        for ci in self._tools:
            if not asm.tool_call_id(ci):
                asm.set_tool_call_identity(ci, tool_call_id=f"call_{uuid.uuid4().hex[:24]}")
            signature = self._encrypted.get(asm.tool_call_id(ci))
            if signature is not None:
                asm.set_signature(ci, signature)
        if reason == "stop" and self._tools:
            reason = "toolUse"
        out: list[ResponseEvent] = [*asm.close_all()]
        out.append(asm.done(reason))
        return out
