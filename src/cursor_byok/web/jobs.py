"""The one `JobRunner` of the server: each job type goes to what the configuration built
for it. A job nothing is configured for is a `JobFailed`, never an exception."""

from __future__ import annotations

from typing import assert_never

from .search import WebSearch
from .types import (
    ImageJob,
    JobFailed,
    JobOutcome,
    JobRunner,
    PageFetchJob,
    ServerJob,
    WebSearchJob,
)

__all__ = ["job_runner"]


def job_runner(*, search: WebSearch | None = None) -> JobRunner:
    async def run(job: ServerJob) -> JobOutcome:
        match job:
            case WebSearchJob():
                if search is None:
                    return JobFailed(message="no web search backend is configured")
                return await search.search(job)
            case PageFetchJob():
                return JobFailed(message="this server does not fetch pages itself")
            case ImageJob():
                return JobFailed(message="no image generation endpoint is configured")
            case _:
                assert_never(job)

    return run
