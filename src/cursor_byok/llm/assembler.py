"""Builds one AssistantMessage from a provider stream and emits the native events for it.

Adapters translate their wire format into calls on a `MessageAssembler`; the assembler owns
content indices, the live `partial` view, JSON parsing of final tool arguments and the single
terminal event. Text is kept as lists of fragments, so each delta costs O(1) whatever the length
of the response so far; the message is joined only when a snapshot is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from .canonical import sorted_value
from .events import (
    ContextLimit,
    DoneEvent,
    ErrorEvent,
    ErrorKind,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from .stream import StreamProgress
from .types import (
    AssistantContent,
    AssistantMessage,
    DoneReason,
    ErrorReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
)

BlockKind = Literal["text", "thinking", "toolCall"]

_json_decoder = msgspec.json.Decoder()


class AssemblerError(RuntimeError):
    """An adapter drove the assembler out of protocol order (a bug, not bad provider input)."""


@dataclass(slots=True)
class _Block:
    kind: BlockKind
    parts: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted: bool = False
    id: str = ""
    name: str = ""
    closed: bool = False
    final: AssistantContent | None = None

    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Final tool arguments: an empty text is `{}`; anything but a JSON object is an error."""
    if raw.strip() == "":
        return {}, None
    try:
        value = _json_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        return {}, f"arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return sorted_value(value), None


class MessageAssembler:
    """Mutable builder behind one stream; also the stream's `PartialView`."""

    def __init__(self, *, api: str, provider: str, model: str) -> None:
        self.api = api
        self.provider = provider
        self.model = model
        self.usage = Usage()
        # The output decoded so far (text, thinking and tool-argument deltas): what a call that
        # ends before the provider's final usage is counted by (llm/stream.py, StreamProgress).
        self.streamed_chars = 0
        self.streamed_deltas = 0
        self.response_id: str | None = None
        self.response_model: str | None = None
        self._blocks: list[_Block] = []
        self._started = False
        self._terminated = False
        self._cache: AssistantMessage | None = None

    # -- the partial view ------------------------------------------------------------------

    def snapshot(self) -> AssistantMessage:
        if self._cache is None:
            self._cache = self._message("stop", None)
        return self._cache

    def progress(self) -> StreamProgress:
        """The usage reported and the output decoded so far (ResponseStream.progress)."""
        return StreamProgress(
            usage=self.usage, chars=self.streamed_chars, deltas=self.streamed_deltas
        )

    @property
    def started(self) -> bool:
        return self._started

    @property
    def terminated(self) -> bool:
        return self._terminated

    @property
    def block_count(self) -> int:
        return len(self._blocks)

    def block_kind(self, index: int) -> BlockKind:
        return self._blocks[index].kind

    def is_open(self, index: int) -> bool:
        return not self._blocks[index].closed

    def open_indices(self) -> list[int]:
        return [i for i, b in enumerate(self._blocks) if not b.closed]

    def has_tool_calls(self) -> bool:
        return any(b.kind == "toolCall" for b in self._blocks)

    def block_text(self, index: int) -> str:
        return self._blocks[index].text()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> StartEvent:
        if self._started:
            raise AssemblerError("start twice")
        self._started = True
        return StartEvent(partial=self)

    def set_usage(self, usage: Usage) -> None:
        """Providers report cumulative usage: the latest report replaces the earlier one."""
        self.usage = usage
        self._cache = None

    def set_response_id(self, response_id: str | None) -> None:
        if response_id and not self.response_id:
            self.response_id = response_id
            self._cache = None

    def set_response_model(self, model: str | None) -> None:
        if model and model != self.model and not self.response_model:
            self.response_model = model
            self._cache = None

    # -- text ------------------------------------------------------------------------------

    def open_text(self, signature: str | None = None) -> tuple[int, TextStart]:
        index = self._open(_Block("text", signature=signature))
        return index, TextStart(content_index=index, partial=self)

    def text_delta(self, index: int, delta: str) -> TextDelta:
        self._open_block(index, "text").parts.append(delta)
        self.streamed_chars += len(delta)  # for progress(), counted inline: the hot path
        self.streamed_deltas += 1
        self._cache = None
        return TextDelta(content_index=index, delta=delta, partial=self)

    def close_text(self, index: int, *, signature: str | None = None) -> TextEnd:
        block = self._open_block(index, "text")
        if signature is not None:
            block.signature = signature
        text = block.text()
        block.final = TextContent(text=text, signature=block.signature)
        block.closed = True
        self._cache = None
        return TextEnd(content_index=index, content=text, partial=self)

    # -- thinking ------------------------------------------------------------------------------

    def open_thinking(
        self, *, signature: str | None = None, redacted: bool = False, text: str = ""
    ) -> tuple[int, ThinkingStart]:
        block = _Block("thinking", signature=signature, redacted=redacted)
        if text:
            block.parts.append(text)
        index = self._open(block)
        return index, ThinkingStart(content_index=index, partial=self)

    def thinking_delta(self, index: int, delta: str) -> ThinkingDelta:
        self._open_block(index, "thinking").parts.append(delta)
        self.streamed_chars += len(delta)  # for progress(), counted inline: the hot path
        self.streamed_deltas += 1
        self._cache = None
        return ThinkingDelta(content_index=index, delta=delta, partial=self)

    def append_signature(self, index: int, fragment: str) -> None:
        block = self._open_block(index)
        block.signature = (block.signature or "") + fragment
        self._cache = None

    def set_signature(self, index: int, signature: str | None) -> None:
        block = self._open_block(index)
        block.signature = signature
        self._cache = None

    def close_thinking(
        self, index: int, *, signature: str | None = None, text: str | None = None
    ) -> ThinkingEnd:
        block = self._open_block(index, "thinking")
        if signature is not None:
            block.signature = signature
        if text is not None:
            block.parts[:] = [text]
        final_text = block.text()
        block.final = ThinkingContent(
            thinking=final_text, signature=block.signature or None, redacted=block.redacted
        )
        block.closed = True
        self._cache = None
        return ThinkingEnd(content_index=index, content=final_text, partial=self)

    # -- tool calls ------------------------------------------------------------------------

    def open_tool_call(
        self, tool_call_id: str, name: str, *, thought_signature: str | None = None
    ) -> tuple[int, ToolCallStart]:
        block = _Block("toolCall", id=tool_call_id, name=name, signature=thought_signature)
        index = self._open(block)
        return index, ToolCallStart(content_index=index, id=tool_call_id, name=name, partial=self)

    def set_tool_call_identity(
        self, index: int, *, tool_call_id: str | None = None, name: str | None = None
    ) -> None:
        """Some providers send the id or name after the first fragment."""
        block = self._open_block(index, "toolCall")
        if tool_call_id and not block.id:
            block.id = tool_call_id
        if name and not block.name:
            block.name = name
        self._cache = None

    def tool_call_id(self, index: int) -> str:
        return self._blocks[index].id

    def tool_call_delta(self, index: int, delta: str) -> ToolCallDelta:
        self._open_block(index, "toolCall").parts.append(delta)
        self.streamed_chars += len(delta)  # for progress(), counted inline: the hot path
        self.streamed_deltas += 1
        self._cache = None
        return ToolCallDelta(content_index=index, delta=delta, partial=self)

    def close_tool_call(
        self,
        index: int,
        *,
        arguments_text: str | None = None,
        arguments: dict[str, Any] | None = None,
        thought_signature: str | None = None,
    ) -> ToolCallEnd:
        """Close with the streamed text, a final text, or an already-parsed object."""
        block = self._open_block(index, "toolCall")
        if thought_signature is not None:
            block.signature = thought_signature
        error: str | None = None
        raw: str | None = None
        if arguments is not None:
            arguments = sorted_value(arguments)
        else:
            if arguments_text is not None:
                block.parts[:] = [arguments_text]
            raw_text = block.text()
            arguments, error = parse_arguments(raw_text)
            raw = raw_text if error else None
        call = ToolCall(
            id=block.id,
            name=block.name,
            arguments=arguments,
            thought_signature=block.signature or None,
            arguments_error=error,
            raw_arguments=raw,
        )
        block.final = call
        block.closed = True
        self._cache = None
        return ToolCallEnd(content_index=index, tool_call=call, partial=self)

    # -- terminal --------------------------------------------------------------------------

    def close_all(self) -> list[TextEnd | ThinkingEnd | ToolCallEnd]:
        """`*_end` for every block still open, in content order."""
        out: list[TextEnd | ThinkingEnd | ToolCallEnd] = []
        for i in self.open_indices():
            kind = self._blocks[i].kind
            if kind == "text":
                out.append(self.close_text(i))
            elif kind == "thinking":
                out.append(self.close_thinking(i))
            else:
                out.append(self.close_tool_call(i))
        return out

    def done(self, reason: DoneReason) -> DoneEvent:
        if not self._started:
            raise AssemblerError("done before start")
        if self.open_indices():
            raise AssemblerError("done with open blocks; call close_all first")
        self._terminate()
        return DoneEvent(reason=reason, message=self._message(reason, None))

    def fail(
        self,
        message: str,
        *,
        reason: ErrorReason = "error",
        http_status: int | None = None,
        retry_after_ms: int | None = None,
        transient: bool = False,
        kind: ErrorKind | None = None,
        context_limit: ContextLimit | None = None,
    ) -> ErrorEvent:
        self._terminate()
        return ErrorEvent(
            reason=reason,
            message=self._message(reason, message),
            http_status=http_status,
            retry_after_ms=retry_after_ms,
            transient=transient,
            kind=kind,
            context_limit=context_limit,
        )

    # -- internals -------------------------------------------------------------------------

    def _terminate(self) -> None:
        if self._terminated:
            raise AssemblerError("a second terminal event")
        self._terminated = True

    def _open(self, block: _Block) -> int:
        if not self._started:
            raise AssemblerError("content before start")
        if self._terminated:
            raise AssemblerError("content after the terminal event")
        self._blocks.append(block)
        self._cache = None
        return len(self._blocks) - 1

    def _open_block(self, index: int, kind: BlockKind | None = None) -> _Block:
        try:
            block = self._blocks[index]
        except IndexError:
            raise AssemblerError(f"no content block {index}") from None
        if block.closed:
            raise AssemblerError(f"content block {index} is closed")
        if kind is not None and block.kind != kind:
            raise AssemblerError(f"content block {index} is {block.kind}, not {kind}")
        return block

    def _content(self) -> tuple[AssistantContent, ...]:
        out: list[AssistantContent] = []
        for b in self._blocks:
            if b.final is not None:
                out.append(b.final)
            elif b.kind == "text":
                out.append(TextContent(text=b.text(), signature=b.signature))
            elif b.kind == "thinking":
                out.append(
                    ThinkingContent(
                        thinking=b.text(), signature=b.signature or None, redacted=b.redacted
                    )
                )
            else:
                # An open tool call shows its arguments only once they are final.
                out.append(ToolCall(id=b.id, name=b.name, thought_signature=b.signature or None))
        return tuple(out)

    def _message(self, stop_reason: Any, error: str | None) -> AssistantMessage:
        return AssistantMessage(
            content=self._content(),
            api=self.api,
            provider=self.provider,
            model=self.model,
            usage=self.usage,
            stop_reason=stop_reason,
            error_message=error,
            response_id=self.response_id,
            response_model=self.response_model,
        )
