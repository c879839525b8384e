"""The context meter: how full a model's window is, and with what.

For every model call the prompt is split into the categories the IDE's meter shows (system
prompt, tool definitions, rules, skills, MCP, subagents, summarized conversation, conversation).
Each category's size is estimated from its characters; the provider's own usage (input plus
cache read and write tokens) is the truth for the total, and the estimates are scaled to it by
largest remainder (apportion.py), so the categories always sum exactly to `used_tokens`. Before
a provider reported usage (or when it reports none) the estimate itself is the total.

Pure and deterministic: the same request and usage always give the same meter. What the
compaction needs is `upcoming_tokens(state, chars)` (the tokens a request would have, calibrated
on the last measured call: `next_request_tokens` over `last_measured`) and `prompt_tokens` (a
call's measured prompt size). docs/loop.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from cursor_byok.llm.prefix_memo import HISTORY_MEMO_MAX, PrefixMemo, fold_history
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
    Usage,
    UserContent,
    UserMessage,
)

from . import derived
from .apportion import largest_remainder
from .categories import CATEGORIES, LABEL_BY_ID, LABELS, Category, PromptChars
from .context import DEFAULT_CONTEXT, TurnContext
from .memo import ByIdentity
from .prompt import mcp_section, render_prompt, render_tools, rules_section, skills_section
from .state import ConversationState, MeterBasis
from .tools import NATIVE_BY_NAME
from .tools_agent import TASK
from .tools_web import MCP_META_TOOLS
from .window import shown

__all__ = [
    "CHARS_PER_TOKEN",
    "IMAGE_TOKENS",
    "LABELS",
    "Category",
    "CategoryTokens",
    "Meter",
    "PromptChars",
    "basis_of",
    "estimate_tokens",
    "last_measured",
    "measure",
    "meter_of_state",
    "next_request_tokens",
    "prompt_chars",
    "prompt_tokens",
    "upcoming_tokens",
]

# Characters per token of the estimate. Measured on the llama.cpp tokenizer of the test model
# (docs/loop.md "Context meter"): 3.4-4.3 across prose, code, rules and tool schemas; only the
# shares between categories depend on it, as the provider's usage sets the total.
CHARS_PER_TOKEN = 4
# Tokens an image is counted as: providers bill a typical screenshot at roughly 800-1,600.
IMAGE_TOKENS = 1_000


class CategoryTokens(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    category: Category
    tokens: int
    chars: int

    @property
    def label(self) -> str:
        return LABEL_BY_ID[str(self.category)]


class Meter(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the meter shows for one request: `used_tokens` of `max_tokens` (the model's
    window), split into `categories` (every Category, in its order) that sum to it exactly.
    `measured`: the total is the provider's usage, not our estimate."""

    used_tokens: int
    max_tokens: int
    categories: tuple[CategoryTokens, ...]
    measured: bool


def _tool_chars(tool: ToolDefinition) -> int:
    schema = msgspec.json.encode(tool.parameters, order="deterministic")
    return len(tool.name) + len(tool.description) + len(schema)


def _tools_categories(tools: tuple[ToolDefinition, ...]) -> tuple[int, int, int]:
    """(native, MCP, subagents) characters: the MCP meta-tools count with the MCP tools they
    reach, Task's definition (the subagent types) as the subagent definitions."""
    native = mcp = subagents = 0
    for tool in tools:
        if tool.name == TASK.name:
            subagents += _tool_chars(tool)
        elif tool.name in NATIVE_BY_NAME and tool.name not in MCP_META_TOOLS:
            native += _tool_chars(tool)
        else:
            mcp += _tool_chars(tool)
    return native, mcp, subagents


# The tools of a request are `render_tools`' tuple, one object per run: measured once.
_tools_chars: ByIdentity[tuple[ToolDefinition, ...], tuple[int, int, int]] = ByIdentity(
    _tools_categories
)


@dataclass(slots=True)
class _Count:
    chars: int = 0
    images: int = 0

    def parts(self, content: tuple[UserContent, ...]) -> None:
        for part in content:
            if isinstance(part, ImageContent):
                self.images += 1
            else:
                self.chars += len(part.text)

    def message(self, message: Message) -> None:
        match message:
            case UserMessage(content=content) | ToolResultMessage(content=content):
                self.parts(content)
            case AssistantMessage(content=blocks):
                for block in blocks:
                    match block:
                        case TextContent(text=text):
                            self.chars += len(text)
                        case ThinkingContent(thinking=thinking):
                            self.chars += len(thinking)
                        case ToolCall(name=name, arguments=args, raw_arguments=raw):
                            body = len(raw) if raw is not None else _json_chars(args)
                            self.chars += len(name) + body


class _CountFold:
    """The characters of a history so far (prefix_memo.py's fold): a model call's history
    extends the previous call's, so each call counts only what was appended instead of every
    message again (issue 28: three full passes a turn, +1 M instructions per 100 messages)."""

    __slots__ = ("fed", "rest", "split", "summary")

    def __init__(self, split: int) -> None:
        self.split = split  # the first `split` messages are the summarized conversation
        self.fed = 0
        self.summary = _Count()
        self.rest = _Count()

    def feed(self, message: Message) -> None:
        (self.summary if self.fed < self.split else self.rest).message(message)
        self.fed += 1

    def copy(self) -> _CountFold:
        twin = _CountFold(self.split)
        twin.fed = self.fed
        twin.summary = _Count(self.summary.chars, self.summary.images)
        twin.rest = _Count(self.rest.chars, self.rest.images)
        return twin


_counts: PrefixMemo[_CountFold] = PrefixMemo(HISTORY_MEMO_MAX)


def _json_chars(value: object) -> int:
    """The length of `value` as compact JSON, escapes not counted, without encoding it: a
    history's tool arguments hold whole files, and encoding them on every call doubled the
    meter's time (10.6 against 5.2 ms for 1,000 messages of 1 MB)."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        items = sum(len(k) + 3 + _json_chars(v) for k, v in value.items())
        return 2 + items + max(len(value) - 1, 0)
    if isinstance(value, list | tuple):
        return 2 + sum(_json_chars(v) for v in value) + max(len(value) - 1, 0)
    if value is None or isinstance(value, bool):
        return 4 if value is None or value else 5
    return len(repr(value))


def _section_chars(section: str, system_prompt: str) -> int:
    return len(section) if section and section in system_prompt else 0


def prompt_chars(
    request: RequestMessages, context: TurnContext, *, summary_messages: int = 0
) -> PromptChars:
    """The characters of `request` per category. `context` tells the system prompt's rules,
    skills and MCP-server sections: each is its own category. A tool is MCP when it is no
    native tool or one of the MCP meta-tools; Task's definition (the subagent types) is the
    subagents'. The first `summary_messages` messages are the summarized conversation (what a
    compaction put first)."""
    prompt = request.system_prompt
    rules = _section_chars(rules_section(context), prompt)
    skills = _section_chars(skills_section(context), prompt)
    servers = _section_chars(mcp_section(context), prompt)
    native, mcp, subagents = _tools_chars(request.tools)
    mcp += servers
    counted = fold_history(
        request.messages, summary_messages, lambda: _CountFold(summary_messages), _counts
    )
    summary, rest = counted.summary, counted.rest
    return PromptChars(
        system_prompt=len(prompt) - rules - skills - servers,
        tools=native,
        rules=rules,
        skills=skills,
        mcp=mcp,
        subagents=subagents,
        summarized_conversation=summary.chars,
        conversation=rest.chars,
        images=summary.images + rest.images,
    )


def estimate_tokens(chars: PromptChars, category: Category | None = None) -> int:
    """Our estimate of one category's tokens (or the whole request's, without `category`)."""
    if category is None:
        return sum(_estimates(chars))
    tokens = -(-chars.of(category) // CHARS_PER_TOKEN)
    if category is Category.CONVERSATION:
        tokens += chars.images * IMAGE_TOKENS
    return tokens


def _estimates(chars: PromptChars) -> list[int]:
    """`estimate_tokens` of every category, in CATEGORIES' order (one pass, no enum calls)."""
    out = [-(-getattr(chars, c) // CHARS_PER_TOKEN) for c in CATEGORIES]
    out[_CONVERSATION] += chars.images * IMAGE_TOKENS
    return out


_CONVERSATION = CATEGORIES.index(Category.CONVERSATION)


def prompt_tokens(usage: Usage) -> int:
    """The prompt size a provider measured: input plus cache reads and writes (our `input`
    excludes both)."""
    return usage.input + usage.cache_read + usage.cache_write


class _LastMeasured:
    """The last request `measure` estimated and the last meter it made, each kept by the
    identity of its `PromptChars` (the answer's meter and the checkpoint's are the same
    measure of the call's request: its planned estimate, then twice scaled to its usage;
    docs/loop.md "Context meter"). One slot each: a run measures one request at a time, and a
    miss measures again. A hit returns what measuring gives (everything is frozen)."""

    __slots__ = ("estimated", "meter")

    def __init__(self) -> None:
        self.estimated: tuple[PromptChars, list[int]] | None = None
        self.meter: tuple[PromptChars, int, int, Meter] | None = None


_last = _LastMeasured()


def measure(chars: PromptChars, *, used: int, window: int) -> Meter:
    """The meter of one request: its estimated categories scaled to `used` (the provider's
    prompt tokens), or left as estimated when `used` is 0 (nothing measured)."""
    kept = _last.meter
    if kept is not None and kept[0] is chars and kept[1] == used and kept[2] == window:
        return kept[3]
    estimated = _last.estimated
    if estimated is not None and estimated[0] is chars:
        estimates = estimated[1]
    else:
        estimates = _estimates(chars)
        _last.estimated = (chars, estimates)
    meter = _measured(chars, estimates, used, window)
    _last.meter = (chars, used, window, meter)
    return meter


def _measured(chars: PromptChars, estimates: list[int], used: int, window: int) -> Meter:
    """`measure` of `chars`, whose `_estimates` are `estimates` (never changed here)."""
    measured = used > 0
    tokens = largest_remainder(estimates, used) if measured else tuple(estimates)
    return Meter(
        used_tokens=sum(tokens),
        max_tokens=window,
        categories=tuple(
            [
                CategoryTokens(category=c, tokens=t, chars=getattr(chars, c))
                for c, t in zip(CATEGORIES, tokens, strict=True)
            ]
        ),
        measured=measured,
    )


def next_request_tokens(chars: PromptChars, last: PromptChars | None, last_used: int) -> int:
    """The tokens a request of `chars` would have, calibrated on the last measured call (its
    request's `last` chars and the provider's `last_used` tokens): what it measured plus the
    estimate of what was added, or, for a request that shrank (after a compaction), the
    estimate scaled by the last call's measured-to-estimated ratio. Without a measured call,
    the estimate."""
    estimate = estimate_tokens(chars)
    if last is None or last_used <= 0:
        return estimate
    before = estimate_tokens(last)
    if estimate >= before:
        return last_used + (estimate - before)
    return -(-estimate * last_used // before) if before else estimate


def _context_of(state: ConversationState) -> TurnContext:
    return state.context if state.context is not None else DEFAULT_CONTEXT


def last_measured(state: ConversationState) -> tuple[PromptChars, int] | None:
    """The active history's last measured call: its request's chars (the messages before its
    answer, with the turn's system prompt and tools) and the provider's prompt tokens for it.
    None when no answer in the active history carries usage."""
    messages = state.messages
    # An answer before the epoch's fresh part measured a request a compaction replaced.
    for i in range(len(messages) - 1, max(state.fresh_from, 0) - 1, -1):
        message = messages[i]
        if isinstance(message, AssistantMessage) and prompt_tokens(message.usage) > 0:
            return _chars_of_state(state, messages[:i]), prompt_tokens(message.usage)
    return None


def _chars_of_state(state: ConversationState, messages: tuple[Message, ...]) -> PromptChars:
    context = _context_of(state)
    request = RequestMessages(
        system_prompt=render_prompt(context), messages=messages, tools=render_tools(context)
    )
    # In a compaction's epoch the view opens with the summary: the summarized conversation.
    summarized = 1 if derived.epoch_of(state, state.view) is not None and messages else 0
    return prompt_chars(request, context, summary_messages=summarized)


def upcoming_tokens(state: ConversationState, chars: PromptChars) -> int:
    """The tokens a request of `chars` would have in this conversation (the compaction's
    trigger): `next_request_tokens` calibrated on the active history's last measured call."""
    last = last_measured(state)
    if last is None:
        return estimate_tokens(chars)
    return next_request_tokens(chars, last[0], last[1])


def basis_of(state: ConversationState) -> MeterBasis | None:
    """The meter basis of `state`'s active history measured from its messages (one pass):
    for a view no model call of its own described yet (a rewind restored it)."""
    last = last_measured(state)
    return MeterBasis(chars=last[0], used=last[1]) if last is not None else None


def meter_of_state(state: ConversationState, window: int) -> Meter:
    """The meter a checkpoint shows for `state`: the prompt of the active history's last model
    call, scaled to the provider's usage of it (`meter_basis`, kept by the loop at each answer:
    O(1)). A state without one (no call yet, or stored before it was kept) is measured from
    its messages: the last measured call, else the estimate of the next request. Its window
    is the one the loop decides by (window.shown: the provider's when it reported a smaller
    one); `window`, the configured one, for a state without a budget."""
    context = state.context
    window = shown(context.window if context is not None else None, window)
    basis = state.meter_basis
    if basis is not None:
        return measure(basis.chars, used=basis.used, window=window)
    last = last_measured(state)
    if last is None:
        return measure(_chars_of_state(state, state.messages), used=0, window=window)
    chars, used = last
    return measure(chars, used=used, window=window)
