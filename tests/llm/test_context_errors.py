"""Each adapter recognises its own provider's "context length exceeded" answer, over real loopback
HTTP, as ErrorKind.CONTEXT_LENGTH; other 400s stay ordinary errors (no kind).

The bodies, and where each comes from:
- Anthropic: the error shape of https://docs.anthropic.com/en/api/errors (`invalid_request_error`)
  with the message the API gives a prompt over the window ("prompt is too long: N tokens > M
  maximum", https://docs.anthropic.com/en/docs/build-with-claude/context-windows).
- OpenAI (Chat Completions and Responses): the error object of
  https://platform.openai.com/docs/guides/error-codes with `code: "context_length_exceeded"`,
  the code the API reference lists for an input over the model's window.
- Gemini: https://ai.google.dev/gemini-api/docs/troubleshooting (400 INVALID_ARGUMENT) with the
  message the API gives an input over the model's token limit.
- llama-server (through the Chat Completions adapter): llama.cpp tools/server, error type
  ERROR_TYPE_EXCEED_CONTEXT_SIZE, rendered as `exceed_context_size_error` with n_prompt_tokens
  and n_ctx (llama.cpp b5xxx and later).
"""

from __future__ import annotations

import pytest

from cursor_byok.llm.anthropic import AnthropicAdapter
from cursor_byok.llm.events import ContextLimit, DoneEvent, ErrorEvent, ErrorKind, ResponseEvent
from cursor_byok.llm.gemini import GeminiAdapter
from cursor_byok.llm.http import HttpAdapter
from cursor_byok.llm.openai_chat import OpenAIChatAdapter
from cursor_byok.llm.openai_responses import OpenAIResponsesAdapter
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.llm.types import RequestMessages, UserMessage
from tests.paths import PROVIDER_FIXTURES
from tests.support.upstream import Reply, fake_upstream

REQUEST = RequestMessages(system_prompt="Be brief.", messages=(UserMessage.of_text("hi"),))
SETTINGS = ModelSettings(model="m", max_output_tokens=100)

ANTHROPIC = (
    '{"type":"error","error":{"type":"invalid_request_error",'
    '"message":"prompt is too long: 208310 tokens > 200000 maximum"},'
    '"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}'
)
OPENAI = (
    '{"error":{"message":"This model\'s maximum context length is 128000 tokens. However, your '
    'messages resulted in 131072 tokens. Please reduce the length of the messages.",'
    '"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'
)
RESPONSES = (
    '{"error":{"message":"Your input exceeds the context window of this model. Please adjust '
    'your input and try again.","type":"invalid_request_error","param":"input",'
    '"code":"context_length_exceeded"}}'
)
GEMINI = (
    '{"error":{"code":400,"message":"The input token count (1300000) exceeds the maximum '
    'number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}'
)
LLAMA_SERVER = (
    '{"error":{"code":400,"message":"request (9412 tokens) exceeds the available context size '
    '(8192 tokens), try increasing it","type":"exceed_context_size_error",'
    '"n_prompt_tokens":9412,"n_ctx":8192}}'
)
OTHER_400 = (
    '{"error":{"message":"Invalid value for temperature","type":"invalid_request_error",'
    '"code":"invalid_value"}}'
)
ANTHROPIC_OTHER = (
    '{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must '
    'alternate"}}'
)


def make(api: str, base_url: str) -> HttpAdapter:
    provider = ProviderSettings(name=api, api=api, base_url=base_url, api_key="k")
    match api:
        case "anthropic":
            return AnthropicAdapter(provider)
        case "openai-chat":
            return OpenAIChatAdapter(provider)
        case "openai-responses":
            return OpenAIResponsesAdapter(provider)
        case "gemini":
            return GeminiAdapter(provider)
    raise AssertionError(api)


async def terminal(adapter: HttpAdapter) -> ResponseEvent:
    stream = adapter.call(REQUEST, SETTINGS)
    while True:
        event = await stream.recv()
        if isinstance(event, DoneEvent | ErrorEvent):
            return event


@pytest.mark.parametrize(
    ("api", "body", "kind"),
    [
        ("anthropic", ANTHROPIC, ErrorKind.CONTEXT_LENGTH),
        ("openai-chat", OPENAI, ErrorKind.CONTEXT_LENGTH),
        ("openai-responses", RESPONSES, ErrorKind.CONTEXT_LENGTH),
        ("gemini", GEMINI, ErrorKind.CONTEXT_LENGTH),
        ("openai-chat", LLAMA_SERVER, ErrorKind.CONTEXT_LENGTH),
        ("openai-chat", OTHER_400, None),
        ("openai-responses", OTHER_400, None),
        ("anthropic", ANTHROPIC_OTHER, None),
        ("gemini", OTHER_400, None),
    ],
)
async def test_context_length_exceeded_is_a_typed_error_kind(
    api: str, body: str, kind: ErrorKind | None
) -> None:
    async with fake_upstream() as up:
        up.push(Reply.json(400, body))
        adapter = make(api, up.base_url)
        event = await terminal(adapter)
        await adapter.aclose()
    assert isinstance(event, ErrorEvent)
    assert event.kind == kind
    assert event.http_status == 400 and not event.transient


async def test_a_responses_stream_that_fails_for_context_length_says_so() -> None:
    failed = (
        '{"type":"response.failed","response":{"id":"resp_1","status":"failed","error":'
        '{"code":"context_length_exceeded","message":"Your input exceeds the context window of '
        'this model."}}}'
    )
    created = '{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}'
    async with fake_upstream() as up:
        up.push(Reply.events([created, failed]))
        adapter = make("openai-responses", up.base_url)
        event = await terminal(adapter)
        await adapter.aclose()
    assert isinstance(event, ErrorEvent) and event.kind == ErrorKind.CONTEXT_LENGTH


# The real body of llama-server (the build tests/realupstream uses, `-c 1024`) for a request of
# 3,033 tokens, recorded into tests/fixtures/providers/llama-server/.
LLAMA_REAL = (PROVIDER_FIXTURES / "llama-server" / "exceed-context-size.json").read_text()
# vLLM's wording (vllm/entrypoints/openai/serving_engine.py) of an input plus max_tokens over
# the window, and Anthropic's for the same (its context-windows page).
VLLM = (
    '{"object":"error","message":"This model\'s maximum context length is 4096 tokens. However, '
    "you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce "
    'the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}'
)
ANTHROPIC_SUM = (
    '{"type":"error","error":{"type":"invalid_request_error","message":"input length and '
    "`max_tokens` exceed context limit: 197888 + 8192 > 200000, decrease input length or "
    '`max_tokens` and try again"}}'
)


@pytest.mark.parametrize(
    ("api", "body", "limit"),
    [
        ("openai-chat", LLAMA_REAL, ContextLimit(window=1024, prompt=3033)),
        ("openai-chat", LLAMA_SERVER, ContextLimit(window=8192, prompt=9412)),
        ("openai-chat", OPENAI, ContextLimit(window=128000, prompt=131072)),
        ("openai-chat", VLLM, ContextLimit(window=4096, prompt=4000)),
        ("openai-responses", RESPONSES, None),  # no numbers given
        ("anthropic", ANTHROPIC, ContextLimit(window=200000, prompt=208310)),
        ("anthropic", ANTHROPIC_SUM, ContextLimit(window=200000, prompt=197888)),
        ("gemini", GEMINI, ContextLimit(window=1048576, prompt=1300000)),
    ],
)
async def test_a_too_long_answer_gives_the_providers_window_and_count(
    api: str, body: str, limit: ContextLimit | None
) -> None:
    async with fake_upstream() as up:
        up.push(Reply.json(400, body))
        adapter = make(api, up.base_url)
        event = await terminal(adapter)
        await adapter.aclose()
    assert isinstance(event, ErrorEvent) and event.kind == ErrorKind.CONTEXT_LENGTH
    assert event.context_limit == limit


async def test_a_responses_stream_failing_for_context_length_gives_the_numbers_it_says() -> None:
    failed = (
        '{"type":"response.failed","response":{"id":"resp_1","status":"failed","error":'
        '{"code":"context_length_exceeded","message":"This model\'s maximum context length is '
        '16384 tokens. However, your messages resulted in 17000 tokens."}}}'
    )
    async with fake_upstream() as up:
        up.push(Reply.events([failed]))
        adapter = make("openai-responses", up.base_url)
        event = await terminal(adapter)
        await adapter.aclose()
    assert isinstance(event, ErrorEvent) and event.kind == ErrorKind.CONTEXT_LENGTH
    assert event.context_limit == ContextLimit(window=16384, prompt=17000)
