"""One adapter per configured provider, chosen by its API, wrapped in the retry policy."""

from __future__ import annotations

from .anthropic import AnthropicAdapter
from .gemini import GeminiAdapter
from .http import HttpAdapter
from .openai_chat import OpenAIChatAdapter
from .openai_responses import OpenAIResponsesAdapter
from .retry import RetryingLLM, RetryPolicy
from .settings import ProviderSettings

ADAPTERS: dict[str, type[HttpAdapter]] = {
    "openai-chat": OpenAIChatAdapter,
    "openai-responses": OpenAIResponsesAdapter,
    "anthropic": AnthropicAdapter,
    "gemini": GeminiAdapter,
}


class LLMRegistry:
    """Adapters are created once per provider and reuse one HTTP connection pool."""

    def __init__(self, policy: RetryPolicy | None = None) -> None:
        self._policy = policy or RetryPolicy()
        self._adapters: dict[str, HttpAdapter] = {}
        self._llms: dict[str, RetryingLLM] = {}

    def adapter(self, provider: ProviderSettings) -> HttpAdapter:
        adapter = self._adapters.get(provider.name)
        if adapter is None:
            try:
                cls = ADAPTERS[provider.api]
            except KeyError:
                raise ValueError(
                    f"provider {provider.name!r}: unknown api {provider.api!r}"
                ) from None
            adapter = self._adapters[provider.name] = cls(provider)
        return adapter

    def llm(self, provider: ProviderSettings) -> RetryingLLM:
        llm = self._llms.get(provider.name)
        if llm is None:
            llm = self._llms[provider.name] = RetryingLLM(self.adapter(provider), self._policy)
        return llm

    async def aclose(self) -> None:
        for adapter in self._adapters.values():
            await adapter.aclose()
        self._adapters.clear()
        self._llms.clear()
