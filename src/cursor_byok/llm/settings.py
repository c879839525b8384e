"""Per-call model settings and per-provider endpoint settings, shared by all adapters."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

Api: TypeAlias = Literal["openai-chat", "openai-responses", "anthropic", "gemini", "faux"]
ReasoningEffort: TypeAlias = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class ModelSettings(msgspec.Struct, frozen=True, omit_defaults=True):
    """What to ask the upstream for, besides the messages."""

    model: str  # upstream model name
    max_output_tokens: int | None = None
    reasoning: bool = False
    reasoning_effort: ReasoningEffort | None = None
    reasoning_budget: int | None = None  # thinking token budget (Anthropic, Gemini 2.x)
    temperature: float | None = None
    extra_body: dict[str, Any] = {}
    extra_headers: dict[str, str] = {}
    # Stable per-conversation key: OpenAI `prompt_cache_key`, session affinity headers.
    cache_key: str | None = None


def with_effort(settings: ModelSettings, effort: str) -> ModelSettings:
    """`settings` for one call at `effort` (a value of ReasoningEffort; "none" turns reasoning
    off): each adapter maps it to its API (Chat `reasoning_effort`, Responses
    `reasoning.effort`, Anthropic and Gemini thinking budgets). A configured
    `reasoning_budget` gives way, since the budget would win over the effort."""
    return msgspec.structs.replace(
        settings,
        reasoning=effort != "none",
        reasoning_effort=effort,
        reasoning_budget=None,
    )


class ProviderSettings(msgspec.Struct, frozen=True, omit_defaults=True):
    """Where and how to reach one provider. `api_key` never reaches logs, errors or storage."""

    name: str  # the provider id in our config, e.g. "openai", "deepseek"
    api: Api
    base_url: str
    api_key: str | None = msgspec.field(default=None)
    headers: dict[str, str] = {}
    connect_timeout_s: float = 30.0
    read_timeout_s: float = 300.0  # one read (or the response head) waiting for bytes
    # Content events (text, thinking, tool-call deltas), not bytes: see llm/deadlines.py.
    first_output_timeout_s: float = 300.0  # from the send to the first one
    idle_timeout_s: float = 120.0  # from one to the next

    def __repr__(self) -> str:  # keep the key out of reprs that end up in logs
        return f"ProviderSettings(name={self.name!r}, api={self.api!r}, base_url={self.base_url!r})"

    __str__ = __repr__
