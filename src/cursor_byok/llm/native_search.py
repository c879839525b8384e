"""A provider's own web search, run as one separate, search-only call.

WebSearch may be answered by a provider that searches for its models: Anthropic's web search
server tool, OpenAI Responses' `web_search` tool, Gemini's Google Search grounding. The call
holds nothing of the conversation: our instructions, the query, the one tool. It goes through
the adapter's usual HTTP machinery (llm/http.py: the key added at send time, its timeouts and
output deadlines, its error texts, redaction), and an observer (`HttpAdapter.send(observe=)`)
reads what the native events leave out: the sources searched and the citations of the answer.
What comes back is `NativeSearchResult`: hits (title, url, snippet), usage; or
`NativeSearchFailed` with a message safe to show. The model's written answer is not kept: the
hits are the result (the conversation's model reads them as a tool result).

Hits: the sources the answer cites first, in the order of their first citation, each with the
cited text as its snippet; then the other sources found, in the provider's order; one hit per
URL. Where each API puts them is said at its collector.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from .anthropic import ANTHROPIC_VERSION, messages_url
from .events import DoneEvent, ErrorEvent
from .gemini import stream_url
from .http import HttpAdapter
from .openai_responses import ENDPOINT as RESPONSES_ENDPOINT
from .sse import SSEEvent
from .stream import PreparedRequest
from .types import Usage

__all__ = [
    "SEARCH_APIS",
    "NativeHit",
    "NativeSearchFailed",
    "NativeSearchResult",
    "native_search",
    "search_request",
    "search_unsupported",
]

SEARCH_APIS: Final = ("anthropic", "openai-responses", "gemini")
# What one search call may cost: searches the model may run (Anthropic's `max_uses`; each is
# billed) and tokens it may write (the answer is only read for its citations).
MAX_SEARCHES: Final = 1
MAX_OUTPUT_TOKENS: Final = 4096
MAX_QUERY_CHARS: Final = 1000
MAX_SNIPPET_CHARS: Final = 500
INSTRUCTIONS: Final = (
    "You look things up on the web for another assistant. Run one web search for the query "
    "you are given. Then say in a few plain sentences what the most relevant results say, "
    "citing each result you use."
)

_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


class NativeHit(msgspec.Struct, frozen=True):
    title: str
    url: str
    snippet: str = ""


class NativeSearchResult(msgspec.Struct, frozen=True):
    hits: tuple[NativeHit, ...]
    usage: Usage  # of the search call (its searches are billed by the provider on top)
    model: str  # the upstream model that searched


class NativeSearchFailed(msgspec.Struct, frozen=True):
    message: str  # names the provider; no key, no server path


def search_unsupported(api: str) -> str | None:
    """Why a provider of `api` cannot search, or None when it can."""
    if api in SEARCH_APIS:
        return None
    return (
        f"the {api} API has no web search of its own; a provider search backend needs a "
        f"provider whose api is one of {', '.join(SEARCH_APIS)}"
    )


# -- what was found ---------------------------------------------------------------------------


class Found:
    """The sources and citations of one search call, in the order they came."""

    def __init__(self) -> None:
        self._titles: dict[str, str] = {}  # url -> title, every source and cited url, in order
        self._cited: dict[str, list[str]] = {}  # url -> cited texts, in order of first citation
        self.error: str | None = None  # a search error the provider reported in the stream

    def source(self, url: Any, title: Any = "") -> None:
        if isinstance(url, str) and url and not self._titles.get(url):
            self._titles[url] = title if isinstance(title, str) else ""

    def cite(self, url: Any, title: Any, text: Any) -> None:
        if not isinstance(url, str) or not url:
            return
        self.source(url, title)
        texts = self._cited.setdefault(url, [])
        if isinstance(text, str) and (text := " ".join(text.split())) and text not in texts:
            texts.append(text)

    def hits(self, limit: int) -> tuple[NativeHit, ...]:
        urls = [*self._cited, *(u for u in self._titles if u not in self._cited)]
        return tuple(
            NativeHit(
                title=self._titles.get(url) or _host(url),
                url=url,
                snippet=_snippet(self._cited.get(url, ())),
            )
            for url in urls[: max(limit, 0)]
        )


def _host(url: str) -> str:
    return urlsplit(url).hostname or url


def _snippet(texts: Any) -> str:
    snippet = " … ".join(texts)
    if len(snippet) > MAX_SNIPPET_CHARS:
        snippet = snippet[: MAX_SNIPPET_CHARS - 1].rstrip() + "…"
    return snippet


class Collector(Protocol):
    """Reads one API's stream for its search results (sans I/O; never raises)."""

    def observe(self, event: SSEEvent) -> None: ...

    def found(self) -> Found: ...


class _JsonCollector:
    """Decodes each event's data; what does not decode is the stream decoder's to report."""

    def __init__(self) -> None:
        self._found = Found()

    def observe(self, event: SSEEvent) -> None:
        try:
            data = _decode.decode(event.data)
        except msgspec.DecodeError:
            return
        if isinstance(data, dict):
            self._data(data)

    def _data(self, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def found(self) -> Found:
        return self._found


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# -- Anthropic Messages -----------------------------------------------------------------------


class AnthropicCollector(_JsonCollector):
    """Sources: the `web_search_result`s of each `web_search_tool_result` block (url, title;
    the page itself is `encrypted_content`, unreadable). Citations: the
    `web_search_result_location`s of text blocks (url, title, cited_text), streamed as
    `citations_delta`s. A `web_search_tool_result_error` is kept as the reason for no hits."""

    def _data(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "content_block_start":
            block = _dict(data.get("content_block"))
            if block.get("type") == "web_search_tool_result":
                self._results(block.get("content"))
            for citation in _dicts(block.get("citations")):
                self._cite(citation)
        elif kind == "content_block_delta":
            delta = _dict(data.get("delta"))
            if delta.get("type") == "citations_delta":
                self._cite(_dict(delta.get("citation")))

    def _results(self, content: Any) -> None:
        if isinstance(content, dict):  # {"type": "web_search_tool_result_error", "error_code"}
            code = content.get("error_code")
            self._found.error = f"the web search failed ({code if isinstance(code, str) else '?'})"
            return
        for result in _dicts(content):
            if result.get("type") == "web_search_result":
                self._found.source(result.get("url"), result.get("title"))

    def _cite(self, citation: dict[str, Any]) -> None:
        if citation.get("type") == "web_search_result_location":
            self._found.cite(citation.get("url"), citation.get("title"), citation.get("cited_text"))


def anthropic_body(model: str, query: str) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": MAX_OUTPUT_TOKENS,
        "system": INSTRUCTIONS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": query}]}],
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": MAX_SEARCHES}],
        "stream": True,
    }


# -- OpenAI Responses -------------------------------------------------------------------------


class ResponsesCollector(_JsonCollector):
    """Sources: each finished `web_search_call` item's action: a search's `sources` (urls only,
    sent because the request asks to `include` them), an opened page's `url`. Citations: the
    `url_citation` annotations of each finished message's `output_text` (title, url, and the
    span of the text that cites: a markdown link, so the snippet is the text before it, back to
    the line start or the previous citation). OpenAI tags cited urls `utm_source=openai`: the
    tag is dropped, so a cited url and its source are one hit."""

    def _data(self, data: dict[str, Any]) -> None:
        if data.get("type") != "response.output_item.done":
            return
        item = _dict(data.get("item"))
        if item.get("type") == "web_search_call":
            action = _dict(item.get("action"))
            for source in _dicts(action.get("sources")):
                self._found.source(_untagged(source.get("url")))
            self._found.source(_untagged(action.get("url")))
        elif item.get("type") == "message":
            for part in _dicts(item.get("content")):
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    self._annotations(part["text"], _dicts(part.get("annotations")))

    def _annotations(self, text: str, annotations: list[dict[str, Any]]) -> None:
        previous_end = 0
        for note in annotations:
            if note.get("type") != "url_citation":
                continue
            start, end = note.get("start_index"), note.get("end_index")
            snippet = ""
            if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= len(text):
                line_start = text.rfind("\n", 0, start) + 1
                snippet = text[max(line_start, previous_end) : start].strip().lstrip("-* ")
                if not snippet and not text[start:end].lstrip().startswith(("[", "([")):
                    snippet = text[start:end]
                previous_end = end
            self._found.cite(_untagged(note.get("url")), note.get("title"), snippet)


def _untagged(url: Any) -> Any:
    """`url` without the `utm_source=openai` OpenAI adds to the links it cites."""
    if not isinstance(url, str) or "utm_source=openai" not in url:
        return url
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in query if (k, v) != ("utm_source", "openai")]
    return urlunsplit(parts._replace(query=urlencode(kept)))


def responses_body(model: str, query: str) -> dict[str, Any]:
    return {
        "model": model,
        "instructions": INSTRUCTIONS,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": query}]}],
        "tools": [{"type": "web_search"}],
        "include": ["web_search_call.action.sources"],
        "max_output_tokens": MAX_OUTPUT_TOKENS,
        "stream": True,
        "store": False,
    }


# -- Gemini -----------------------------------------------------------------------------------


class GeminiCollector(_JsonCollector):
    """Sources: `groundingMetadata.groundingChunks[].web` (uri, title; the uri is often
    Google's redirect and the title the site's domain). Citations: `groundingSupports`, each a
    segment of the answer (its `text`, else its UTF-8 byte offsets into the answer) and the
    chunks it rests on. The metadata may come on several chunks of the stream: the last
    non-empty chunk list wins, supports are gathered from all."""

    def __init__(self) -> None:
        super().__init__()
        self._text: list[str] = []
        self._chunks: list[dict[str, Any]] = []
        self._supports: list[dict[str, Any]] = []

    def _data(self, data: dict[str, Any]) -> None:
        for candidate in _dicts(data.get("candidates"))[:1]:
            for part in _dicts(_dict(candidate.get("content")).get("parts")):
                if isinstance(part.get("text"), str) and not part.get("thought"):
                    self._text.append(part["text"])
            metadata = _dict(candidate.get("groundingMetadata"))
            if chunks := _dicts(metadata.get("groundingChunks")):
                self._chunks = chunks
            for support in _dicts(metadata.get("groundingSupports")):
                if support not in self._supports:
                    self._supports.append(support)

    def found(self) -> Found:
        found = Found()
        webs = [_dict(chunk.get("web")) for chunk in self._chunks]
        answer = "".join(self._text).encode()
        for support in self._supports:
            segment = _dict(support.get("segment"))
            text = segment.get("text")
            if not isinstance(text, str):
                start, end = segment.get("startIndex", 0), segment.get("endIndex")
                ok = isinstance(start, int) and isinstance(end, int)
                text = answer[start:end].decode(errors="replace") if ok else ""
            indices = support.get("groundingChunkIndices")
            for index in indices if isinstance(indices, list) else ():
                if isinstance(index, int) and 0 <= index < len(webs):
                    found.cite(webs[index].get("uri"), webs[index].get("title"), text)
        for web in webs:
            found.source(web.get("uri"), web.get("title"))
        return found


def gemini_body(query: str) -> dict[str, Any]:
    return {
        "systemInstruction": {"parts": [{"text": INSTRUCTIONS}]},
        "contents": [{"role": "user", "parts": [{"text": query}]}],
        "tools": [{"google_search": {}}],
        "generationConfig": {"maxOutputTokens": MAX_OUTPUT_TOKENS},
    }


# -- the call ---------------------------------------------------------------------------------


_SSE_HEADERS: Final = (("content-type", "application/json"), ("accept", "text/event-stream"))


def search_request(api: str, base_url: str, model: str, query: str) -> PreparedRequest | None:
    """The exact search-only request for a provider of `api`; None for an API without search."""
    query = query[:MAX_QUERY_CHARS]
    match api:
        case "anthropic":
            return PreparedRequest(
                url=messages_url(base_url),
                body=_encode.encode(anthropic_body(model, query)),
                model=model,
                headers=(
                    ("content-type", "application/json"),
                    ("anthropic-version", ANTHROPIC_VERSION),
                ),
            )
        case "openai-responses":
            return PreparedRequest(
                url=base_url.rstrip("/") + RESPONSES_ENDPOINT,
                body=_encode.encode(responses_body(model, query)),
                model=model,
                headers=_SSE_HEADERS,
            )
        case "gemini":
            return PreparedRequest(
                url=stream_url(base_url, model),
                body=_encode.encode(gemini_body(query)),
                model=model,
                headers=_SSE_HEADERS,
            )
        case _:
            return None


COLLECTORS: Final[dict[str, type[_JsonCollector]]] = {
    "anthropic": AnthropicCollector,
    "openai-responses": ResponsesCollector,
    "gemini": GeminiCollector,
}


def collector_for(api: str) -> Collector | None:
    cls = COLLECTORS.get(api)
    return cls() if cls is not None else None


async def native_search(
    adapter: HttpAdapter, model: str, query: str, *, max_results: int, timeout_s: float
) -> NativeSearchResult | NativeSearchFailed:
    """Search with the provider of `adapter`; the whole call bounded by `timeout_s`."""
    provider = adapter.provider
    name = provider.name
    prepared = search_request(provider.api, provider.base_url, model, query)
    collector = collector_for(provider.api)
    if prepared is None or collector is None:
        return NativeSearchFailed(f"{name}: {search_unsupported(provider.api)}")
    if not query.strip():
        return NativeSearchFailed(f"{name}: the search query is empty")
    stream = adapter.send(prepared, observe=collector.observe)
    done: DoneEvent | None = None
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                event = await stream.recv()
                if isinstance(event, ErrorEvent):
                    text = event.message.error_message or "the search call failed"
                    return NativeSearchFailed(text if text.startswith(name) else f"{name}: {text}")
                if isinstance(event, DoneEvent):
                    done = event
                    break
    except TimeoutError:
        return NativeSearchFailed(f"{name}: the web search took longer than {timeout_s:g} s")
    finally:
        await stream.aclose()
    found = collector.found()
    hits = found.hits(max_results)
    if not hits:
        why = found.error or "the web search found nothing (or the model ran no search)"
        return NativeSearchFailed(f"{name}: {why}")
    return NativeSearchResult(hits=hits, usage=done.message.usage, model=model)
