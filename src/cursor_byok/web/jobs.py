"""The one `JobRunner` the runtime gets: each job type goes to the backend configured for it.

Every arm returns a value; a backend that raises anyway becomes a `JobFailed` here, so the
runner keeps the promise `JobRunner` makes (it never raises).
"""

from __future__ import annotations

import logging
from typing import assert_never

from .convert import ConvertFailed, PageConverter
from .fetch import PageFetcher
from .images import ImageMaker
from .search import WebSearch
from .types import (
    ImageJob,
    JobFailed,
    JobOutcome,
    JobRunner,
    PageFetched,
    PageFetchJob,
    PageTextJob,
    ServerJob,
    WebSearchJob,
)

__all__ = ["job_runner"]

log = logging.getLogger("cursor_byok.web")


def job_runner(
    *,
    fetcher: PageFetcher | None = None,
    images: ImageMaker | None = None,
    search: WebSearch | None = None,
    converter: PageConverter | None = None,
) -> JobRunner:
    """The runner for this server's configuration: `fetcher` for WebFetch's server-side fetch
    (it refuses when [web_fetch] server_side is off), `images` for GenerateImage (None: no
    [image_generation]), `search` for WebSearch (None: no backend configured), `converter`
    for the pages clients fetched (web/convert.py; None: such pages are not read)."""

    pages = fetcher if fetcher is not None else PageFetcher(enabled=False)

    async def run(job: ServerJob) -> JobOutcome:
        try:
            return await _dispatch(job)
        except Exception:
            log.exception("a %s failed", type(job).__name__)
            return JobFailed(message="the server failed to run the tool")

    async def _dispatch(job: ServerJob) -> JobOutcome:
        match job:
            case WebSearchJob():
                if search is None:
                    return JobFailed(message="this server has no web search configured")
                return await search.search(job)
            case PageFetchJob():
                return await pages.fetch(job)
            case PageTextJob():
                if converter is None:
                    return JobFailed(message="this server has no page converter")
                text = await converter.html_text(job.content, job.content_type)
                if isinstance(text, ConvertFailed):
                    return JobFailed(message=text.message)
                return PageFetched(
                    url=job.url, status=job.status, content_type=job.content_type, text=text
                )
            case ImageJob():
                if images is None:
                    return JobFailed(message="this server has no image generation configured")
                return await images.make(job)
            case _:
                assert_never(job)

    return run
