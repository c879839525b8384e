"""Search hits from a backend's result list: what every backend's parser shares."""

from __future__ import annotations

import html
import re
from typing import Any

from ..types import SearchHit

__all__ = ["MAX_SNIPPET_CHARS", "MAX_TITLE_CHARS", "clean", "hits_from"]

MAX_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 1_000
_TAG = re.compile(r"<[^>]{0,200}>")
_SPACE = re.compile(r"\s+")


def clean(text: str, limit: int) -> str:
    """One line of plain text: markup (Brave marks matches with <strong>) and entities gone,
    runs of white space folded, at most `limit` characters."""
    plain = _SPACE.sub(" ", html.unescape(_TAG.sub("", text))).strip()
    return plain if len(plain) <= limit else plain[: limit - 1].rstrip() + "…"


def hits_from(items: list[Any], max_results: int, *, snippet_key: str) -> tuple[SearchHit, ...]:
    """The first `max_results` items that have a URL, each as a hit; other items are skipped."""
    hits: list[SearchHit] = []
    for item in items:
        if len(hits) >= max_results:
            break
        if not isinstance(item, dict):
            continue
        url = item.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            continue
        title = item.get("title")
        snippet = item.get(snippet_key)
        hits.append(
            SearchHit(
                title=clean(title, MAX_TITLE_CHARS) if isinstance(title, str) else "",
                url=url,
                snippet=clean(snippet, MAX_SNIPPET_CHARS) if isinstance(snippet, str) else "",
            )
        )
    return tuple(hits)
