"""Google Gemini `streamGenerateContent?alt=sse` adapter (api id "gemini").

Request: the native history becomes `contents` (roles user/model) with `systemInstruction`,
`tools[].functionDeclarations` (full JSON Schema in `parametersJsonSchema`) and
`generationConfig`. The body is a function of the history alone, serialized once; each message
maps to its own `contents` item(s), so a longer history only appends items (Gemini's implicit
prefix cache needs nothing else: there are no cache markers).

Stream: every SSE `data` is one `GenerateContentResponse` chunk; only `candidates[0]` is read.
Text and thought parts open a block when the part kind switches, function calls are emitted
start/delta/end, and `usageMetadata` (repeated on every chunk) replaces the usage each time.
Gemini has no end marker: a response is complete when a chunk carried a `finishReason` and the
HTTP body then ended, so `done` is returned from `finish()`; EOF without a finishReason is an
error. Streamed arguments (`partialArgs` by JSON path, `willContinue`) are assembled into the
arguments object, and each fragment is also re-emitted as incremental JSON text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias
from urllib.parse import quote

import msgspec

from .. import context_errors
from ..assembler import MessageAssembler
from ..canonical import sorted_value
from ..events import ErrorKind, ResponseEvent
from ..http import HttpAdapter, error_text_from_body
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
    ToolDefinition,
    ToolResultMessage,
    Usage,
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
_GEMINI_VERSION = re.compile(r"gemini-(\d+)")
# Standard or URL-safe base64 (protobuf JSON accepts both), padded or not.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

Json: TypeAlias = dict[str, Any]


# -- request ---------------------------------------------------------------------------------


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
    out: list[Json],
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

    __slots__ = ("contents", "echoed", "gemini3", "results", "transform")

    def __init__(self, target: Target) -> None:
        self.transform = HistoryTransform(target, normalize_tool_call_id)
        self.gemini3 = (gemini_major_version(target.model) or 0) >= 3
        self.contents: list[Json] = []
        self.results: list[ToolResultMessage] = []  # waiting for the end of their run
        self.echoed: set[str] = set()  # call ids sent to the model, so their results too

    def copy(self) -> GeminiHistory:
        other = GeminiHistory.__new__(GeminiHistory)
        other.transform = self.transform.copy()
        other.gemini3 = self.gemini3
        other.contents = list(self.contents)
        other.results = list(self.results)
        other.echoed = set(self.echoed)
        return other

    def feed(self, message: Message) -> None:
        target = self.transform.target
        for m in self.transform.feed(message):
            _append_content(m, target, self.gemini3, self.contents, self.results, self.echoed)

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
    target = Target(api=API, provider=provider, model=settings.model)
    history = fold_history(request.messages, target, lambda: GeminiHistory(target), memo)
    body: Json = {}
    if request.system_prompt:
        body["systemInstruction"] = {"parts": [{"text": _text(request.system_prompt)}]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [tool_declaration(t) for t in request.tools]}]
    body["contents"] = history.converted()
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


# -- stream ----------------------------------------------------------------------------------

PathMember: TypeAlias = str | int
JsonPath: TypeAlias = tuple[PathMember, ...]

_PATH_TOKEN = re.compile(
    r"\.([^.\[\]]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]"
)
_ESCAPE = re.compile(r"\\(.)")


class PathError(ValueError):
    pass


@functools.lru_cache(maxsize=4096)
def parse_json_path(text: str) -> JsonPath:
    """The RFC 9535 subset Gemini uses for `partialArgs`: `$`, `.name`, `[n]`, `['name']`."""
    if not text.startswith("$"):
        raise PathError(f"JSON path must start with $: {text!r}")
    out: list[PathMember] = []
    pos = 1
    while pos < len(text):
        match = _PATH_TOKEN.match(text, pos)
        if match is None:
            raise PathError(f"unsupported JSON path: {text!r}")
        name, index, single, double = match.groups()
        if name is not None:
            out.append(name)
        elif index is not None:
            out.append(int(index))
        else:
            out.append(_ESCAPE.sub(r"\1", single if single is not None else double))
        pos = match.end()
    if not out:
        raise PathError("JSON path $ does not name an argument")
    return tuple(out)


def _merged(old: Any, value: Any, append: bool) -> Any:
    return old + value if append and isinstance(old, str) else value


def _child(old: Any, next_member: PathMember, path: JsonPath) -> Any:
    want: type = dict if isinstance(next_member, str) else list
    if old is None:
        return want()
    if not isinstance(old, want):
        raise PathError(f"conflicting value types at {path!r}")
    return old


def assign_path(root: Json, path: JsonPath, value: Any, *, append: bool) -> None:
    """Set `value` at `path` inside `root`, creating objects and arrays on the way. With
    `append`, a string value extends the string already there (a continued fragment)."""
    node: Any = root
    last = len(path) - 1
    for depth, member in enumerate(path):
        if isinstance(member, str):
            if not isinstance(node, dict):
                raise PathError(f"{member!r} used as a key of a non-object")
            if depth == last:
                node[member] = _merged(node.get(member), value, append)
                return
            child = node[member] = _child(node.get(member), path[depth + 1], path)
        else:
            if not isinstance(node, list):
                raise PathError(f"[{member}] used as an index of a non-array")
            while len(node) <= member:
                node.append(None)
            if depth == last:
                node[member] = _merged(node[member], value, append)
                return
            child = node[member] = _child(node[member], path[depth + 1], path)
        node = child


@dataclass(slots=True)
class _Frame:
    is_object: bool
    count: int = 0
    keys: set[str] = field(default_factory=set)


class ArgumentsWriter:
    """Incremental JSON text of an arguments object streamed as path fragments.

    While fragments arrive in document order (as Gemini sends them), the concatenated output is
    exactly the JSON of the assembled object. A fragment that goes back to an earlier place
    cannot be written incrementally: the writer then falls silent, and only the assembled object
    (which is always the final arguments) is authoritative.
    """

    __slots__ = ("_frames", "_path", "_string_open", "broken", "started")

    def __init__(self) -> None:
        self._frames: list[_Frame] = [_Frame(is_object=True)]
        self._path: JsonPath = ()
        self._string_open = False
        self.broken = False
        self.started = False

    def feed(self, path: JsonPath, value: Any, *, is_string: bool, more: bool) -> str:
        if self.broken:
            return ""
        if self._string_open and is_string and path == self._path:
            text = _encoder.encode(value).decode()[1:-1]
            if not more:
                self._string_open = False
                return text + '"'
            return text
        common = 0
        for a, b in zip(self._path, path, strict=False):
            if a != b or type(a) is not type(b):
                break
            common += 1
        if self._path and (common >= len(path) or common >= len(self._path)):
            self.broken = True
            return ""
        frame = self._frames[common] if common < len(self._frames) else None
        member = path[common]
        if frame is None or not self._fits(frame, member):
            self.broken = True
            return ""
        for m in path[common + 1 :]:
            if isinstance(m, int) and m != 0:  # a new array must start at index 0
                self.broken = True
                return ""
        out: list[str] = []
        if self._string_open:
            out.append('"')
            self._string_open = False
        if not self.started:
            out.append("{")
            self.started = True
        while len(self._frames) > common + 1:
            out.append("}" if self._frames.pop().is_object else "]")
        self._add_member(frame, member, out)
        for m in path[common + 1 :]:
            child = _Frame(is_object=isinstance(m, str))
            out.append("{" if child.is_object else "[")
            self._frames.append(child)
            self._add_member(child, m, out)
        if is_string:
            text = _encoder.encode(value).decode()
            if more:
                text = text[:-1]
                self._string_open = True
            out.append(text)
        else:
            out.append(_encoder.encode(value).decode())
        self._path = path
        return "".join(out)

    def close(self) -> str:
        """The text that completes the object (`{}` when nothing was written)."""
        if self.broken:
            return ""
        if not self.started:
            return "{}"
        out = ['"'] if self._string_open else []
        while self._frames:
            out.append("}" if self._frames.pop().is_object else "]")
        return "".join(out)

    @staticmethod
    def _fits(frame: _Frame, member: PathMember) -> bool:
        if frame.is_object:
            return isinstance(member, str) and member not in frame.keys
        return isinstance(member, int) and member == frame.count

    @staticmethod
    def _add_member(frame: _Frame, member: PathMember, out: list[str]) -> None:
        if frame.count:
            out.append(",")
        if frame.is_object:
            assert isinstance(member, str)
            out.append(_encoder.encode(member).decode() + ":")
            frame.keys.add(member)
        frame.count += 1


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


# -- adapter ---------------------------------------------------------------------------------


class GeminiAdapter(HttpAdapter):
    """Google Gemini over `streamGenerateContent?alt=sse`, authenticated by `x-goog-api-key`."""

    api = API

    def __init__(self, provider: ProviderSettings):
        super().__init__(provider)
        self.histories: PrefixMemo[GeminiHistory] = PrefixMemo()

    def prepare(self, request: RequestMessages, settings: ModelSettings) -> PreparedRequest:
        body = build_body(request, settings, self.provider.name, self.histories)
        headers = [("content-type", "application/json"), ("accept", "text/event-stream")]
        headers.extend(settings.extra_headers.items())
        return PreparedRequest(
            url=stream_url(self.provider.base_url, settings.model),
            body=_encoder.encode(body),
            model=settings.model,
            headers=tuple(headers),
        )

    def auth_headers(self) -> list[tuple[str, str]]:
        # Provider-level headers may hold proxy credentials, so they are added at send time too.
        headers = list(self.provider.headers.items())
        if self.provider.api_key:
            headers.append(("x-goog-api-key", self.provider.api_key))
        return headers

    def new_decoder(self, assembler: MessageAssembler) -> GeminiDecoder:
        return GeminiDecoder(assembler, redact=self.redact)

    def error_kind(self, status: int, body: bytes) -> ErrorKind | None:
        return context_errors.gemini(status, body)

    def error_message(self, status: int, body: bytes) -> str:
        try:
            data = _decoder.decode(body)
        except msgspec.DecodeError:
            return error_text_from_body(body)
        return error_text(data) or error_text_from_body(body)


__all__ = [
    "API",
    "DEFAULT_BASE_URL",
    "ArgumentsWriter",
    "GeminiAdapter",
    "GeminiDecoder",
    "build_body",
    "build_contents",
    "generated_tool_call_id",
    "normalize_tool_call_id",
    "parse_json_path",
]
