"""The jobs a tool machine can ask the server to run, and their outcomes.

A machine that needs server-side work (WebSearch after its approval, GenerateImage) returns
`Send(job=...)`; the runtime runs the job through `JobRunner` and feeds the outcome back
(`ToolMachine.deliver`). Every outcome is a value: a failure is `JobFailed` with a message the
model can read, never an exception across the boundary.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec

__all__ = [
    "ImageJob",
    "ImageMade",
    "JobFailed",
    "JobOutcome",
    "JobRunner",
    "PageFetchJob",
    "PageFetched",
    "PageTextJob",
    "SearchHit",
    "SearchResults",
    "ServerJob",
    "WebSearchJob",
]


class WebSearchJob(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Search the web for `query` (WebSearch, after the IDE approved it)."""

    query: str
    model: str = ""  # the run's model id: a per-model backend override applies


class SearchHit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    title: str
    url: str
    snippet: str = ""


class SearchResults(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    hits: tuple[SearchHit, ...]
    backend: str  # which configured backend answered (for logs and the result text)


class PageFetchJob(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Fetch `url` on the server (WebFetch for a client that cannot fetch; off by default)."""

    url: str


class PageTextJob(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Turn a page the client fetched (HTML) into the text the model reads. Its outcome is a
    `PageFetched` carrying the same url, status and content type."""

    url: str
    status: int
    content_type: str
    content: str


class PageFetched(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    url: str  # after redirects
    status: int
    content_type: str
    text: str  # the page cleaned to text, bounded


class ImageJob(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Generate one image (GenerateImage, after the IDE approved it)."""

    description: str
    aspect_ratio: str = ""  # "1:1", "16:9", ... ("" = the endpoint's default)
    model: str = ""  # the run's model id


class ImageMade(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    data: bytes
    mime_type: str


class JobFailed(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The job could not be done; `message` is for the model (no secrets, no server paths)."""

    message: str


ServerJob = WebSearchJob | PageFetchJob | PageTextJob | ImageJob
JobOutcome = SearchResults | PageFetched | ImageMade | JobFailed
# Runs one job; must not raise (a failure is a JobFailed). The runtime bounds its time.
JobRunner = Callable[[ServerJob], Awaitable[JobOutcome]]
