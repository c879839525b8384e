"""Compaction, computed: how big the next request is, where the cut goes, what the summary call
asks and the message its answer becomes. transition.py decides when; these only compute.

The token estimate lives in one function, `estimated_tokens`: the provider's own count of the
last answer's request (input, cache and output tokens, recorded with every answer) plus a
character estimate of what was appended since. The context meter (issue 16 point 1) may later
replace the character part with its per-category estimate; nothing else here counts tokens.

The cut keeps the last user message and everything after it. When that tail alone would not
fit, it goes inside the turn, at a tool-result boundary (the results of one assistant message
followed by the next assistant message): an assistant message, with its thinking signatures
and tool calls, and the results of those calls always stay on the same side.
"""

from __future__ import annotations

import math

import msgspec

from cursor_byok.llm.types import (
    AssistantMessage,
    ImageContent,
    Message,
    RequestMessages,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)

from .context import ContextWindow
from .memo import ByIdentity
from .window import rooms

# The character estimate: about four characters per token for English text and code (the
# usual rule of thumb; it overestimates JSON-heavy text a little, which errs on the safe side).
CHARS_PER_TOKEN = 4
# What one image costs in the estimate (providers bill a mid-size image at ~1-2k tokens).
IMAGE_CHARS = 1600 * CHARS_PER_TOKEN
# A tool result's text in the summary request is cut to this many characters (its head and
# tail): the summary needs what a result said, not every line of a long listing.
SUMMARY_RESULT_CHARS = 6000
# What the summary request itself costs besides the transcript (our prompt, framing): it
# counts against the summarizing model's window only, not the main model's (window.py).
SUMMARY_OVERHEAD_TOKENS = 600

SUMMARY_PROMPT = (
    "You condense a coding assistant's conversation so the assistant can carry on without "
    "the full transcript. You receive the transcript of the earlier part of the conversation. "
    "Write a summary that lets the assistant continue seamlessly, in these sections:\n"
    "1. The user's goals and explicit requests, in their own terms, including constraints and "
    "preferences they stated.\n"
    "2. What has been done: files read, created or changed (with paths), commands run and "
    "what they showed, decisions taken and why.\n"
    "3. Important facts discovered: names, paths, errors, versions, code fragments that will "
    "matter again (quote them exactly).\n"
    "4. Open work: what was in progress when the transcript ends and the next steps.\n"
    "Be concrete and complete but brief; never invent anything that is not in the transcript. "
    "Answer with the summary only."
)

SUMMARY_HEADER = (
    "[The earlier part of this conversation was compacted to save context. This summary "
    "replaces it; the messages after it are the conversation as it went on.]\n\n"
)

TRIMMED_NOTE = "(The oldest part of the conversation did not fit and is left out.)\n\n"


def chars_of(message: Message) -> int:
    """The characters a message adds to a request, for the character estimate."""
    total = 0
    for block in message.content:
        match block:
            case TextContent(text=text):
                total += len(text)
            case ThinkingContent(thinking=thinking, signature=signature):
                total += len(thinking) + len(signature or "")
            case ToolCall(name=name, arguments=arguments):
                total += len(name) + len(msgspec.json.encode(arguments))
            case ImageContent():
                total += IMAGE_CHARS
    return total + 16  # the role and framing every message carries


def tokens_of_chars(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def fixed_tokens(system_prompt: str, tools: tuple[ToolDefinition, ...]) -> int:
    """The estimate of what every request of the turn carries besides the history."""
    return tokens_of_chars(len(system_prompt) + _tools_chars(tools))


def _chars_of_tools(tools: tuple[ToolDefinition, ...]) -> int:
    return sum(
        len(tool.name) + len(tool.description) + len(msgspec.json.encode(tool.parameters))
        for tool in tools
    )


# `render_tools`' tuple is one object per run: its schemas are encoded once (memo.py).
_tools_chars: ByIdentity[tuple[ToolDefinition, ...], int] = ByIdentity(_chars_of_tools)


def estimated_tokens(messages: tuple[Message, ...], fresh_from: int, fixed: int) -> int:
    """The next request's size: the provider's count for the last answer sent after the view's
    last compaction (its request plus its output), plus the character estimate of the messages
    after it; without such an answer, the character estimate of everything (`fixed` for the
    system prompt and tools)."""
    for i in range(len(messages) - 1, fresh_from - 1, -1):
        message = messages[i]
        if isinstance(message, AssistantMessage) and message.usage.total > 0:
            after = sum(chars_of(m) for m in messages[i + 1 :])
            return message.usage.total + tokens_of_chars(after)
    return fixed + tokens_of_chars(sum(chars_of(m) for m in messages))


class Cut(msgspec.Struct, frozen=True):
    """A planned compaction: the kept tail starts at `at`; the summary gets `summary` tokens."""

    at: int
    summary: int


def last_user(messages: tuple[Message, ...]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], UserMessage):
            return i
    return None


def boundaries(messages: tuple[Message, ...], after: int) -> list[int]:
    """The tool-result boundaries after position `after`: k with a tool result at k - 1 and an
    assistant message at k (every result of the message before is then before k)."""
    return [
        k
        for k in range(max(after, 0) + 1, len(messages))
        if isinstance(messages[k - 1], ToolResultMessage)
        and isinstance(messages[k], AssistantMessage)
    ]


def plan_cut(
    messages: tuple[Message, ...],
    *,
    fixed: int,
    window: ContextWindow,
    first: int,
    scale: float = 1.0,
) -> Cut | None:
    """Where the kept tail starts and how long the summary may be (window.rooms: below the
    threshold first, else within the window). `first`: how many messages at the start are not
    worth a summary alone (1 when the history starts with an earlier summary: summarizing only
    it would shrink nothing); the cut comes after more than those.

    In each room the cut keeps the last user message and everything after it when that fits;
    else it goes inside the turn, at the earliest tool-result boundary whose tail takes at
    most half the room (so the next compaction is not at once), else the earliest that fits
    at all. None: no cut fits (nothing to summarize, or the tail is too big). `scale`: the
    provider's tokens per estimated token (window.scale), applied to every message's size;
    `fixed` is given in the provider's tokens too."""
    sizes = [math.ceil(tokens_of_chars(chars_of(m)) * scale) for m in messages]
    tail = [0] * (len(messages) + 1)
    for i in range(len(messages) - 1, -1, -1):
        tail[i] = tail[i + 1] + sizes[i]
    u = last_user(messages)
    inside = [k for k in boundaries(messages, u if u is not None else 0) if k > first]
    for room in rooms(window, fixed):
        if u is not None and u > first and tail[u] <= room.tail:
            return Cut(at=u, summary=room.summary)
        for limit in (room.tail // 2, room.tail):
            for k in inside:
                if tail[k] <= limit:
                    return Cut(at=k, summary=room.summary)
    return None


def requested_cut(messages: tuple[Message, ...], first: int) -> int | None:
    """The cut of a /summarize: before the last user message, when anything worth a summary
    precedes it; None: nothing to compact."""
    u = last_user(messages)
    if u is None or u <= first:
        return None
    return u


def _clip_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters left out ...]\n{text[-half:]}"


def transcript_piece(message: Message) -> str:
    """One message of the summary request's transcript (plain text: the summary model need not
    support this conversation's tools, images or thinking signatures)."""
    match message:
        case UserMessage(content=content):
            parts = [p.text if isinstance(p, TextContent) else "[an image]" for p in content]
            return "## User\n" + "\n".join(parts)
        case AssistantMessage(content=content):
            lines: list[str] = []
            for block in content:
                if isinstance(block, TextContent) and block.text:
                    lines.append(block.text)
                elif isinstance(block, ToolCall):
                    args = msgspec.json.encode(block.arguments).decode()
                    lines.append(f"[calls {block.name} {_clip_middle(args, 2000)}]")
            return "## Assistant\n" + "\n".join(lines)
        case ToolResultMessage(tool_name=name, content=content, is_error=is_error):
            text = "\n".join(
                p.text if isinstance(p, TextContent) else "[an image]" for p in content
            )
            label = "error" if is_error else "result"
            return f"## {name} {label}\n{_clip_middle(text, SUMMARY_RESULT_CHARS)}"


def summary_request(
    head: tuple[Message, ...], window: ContextWindow, answer: int = 0
) -> RequestMessages:
    """The summary call's request: our prompt and the transcript of `head`, trimmed from the
    oldest side to fit the summarizing model's window with room for its answer (`answer`
    tokens, else its `summary_output`)."""
    model_window = window.summary_window or window.size
    room = model_window - (answer or window.summary_output) - SUMMARY_OVERHEAD_TOKENS
    limit = max(room, 0) * CHARS_PER_TOKEN
    pieces = [transcript_piece(m) for m in head]
    total = sum(len(p) + 2 for p in pieces)
    dropped = 0
    while len(pieces) > 1 and total > limit:
        total -= len(pieces[0]) + 2
        pieces.pop(0)
        dropped += 1
    text = "\n\n".join(pieces)
    if len(text) > limit:  # the newest message alone is too long: keep its end
        text = text[len(text) - limit :]
        dropped += 1
    if dropped:
        text = TRIMMED_NOTE + text
    return RequestMessages(
        system_prompt=SUMMARY_PROMPT,
        messages=(UserMessage.of_text("Transcript to summarize:\n\n" + text),),
    )


def summary_message(summary: str) -> UserMessage:
    """The message that stands for the summarized history: the first of the new epoch's view."""
    return UserMessage.of_text(SUMMARY_HEADER + summary.strip())
