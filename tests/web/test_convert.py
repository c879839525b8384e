"""The page converter's worker pool (web/convert.py) with real worker processes: conversions,
their bounds (size refused before sending, time killed at the deadline, memory), every page
shape bounded, the pool's lifecycle (lazy start, bounded workers, replaced when killed, closed
with nothing left), and charsets that used to raise."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable

import pytest

from cursor_byok.web.convert import ConvertFailed, ConvertLimits, PageConverter
from cursor_byok.web.page_text import page_text
from tests.support.hostile_pages import SHAPES, normal_page, page

TIMEOUT_S = 1.0
# A conversion ends within its deadline plus the kill and the reply (the machine is shared).
SLACK_S = 2.0
NO_HANG_S = 30.0  # a missing deadline fails the test instead of hanging it
HOSTILE = page("nested-ul-li", 400_000)  # minutes of parsing: always past the deadline


@pytest.fixture
async def pool() -> AsyncIterator[Callable[..., PageConverter]]:
    made: list[PageConverter] = []

    def make(**limits: float) -> PageConverter:
        converter = PageConverter(ConvertLimits(**{"timeout_s": TIMEOUT_S, **limits}))  # type: ignore[arg-type]
        made.append(converter)
        return converter

    yield make
    for converter in made:
        await converter.aclose()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill 0: read its state.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


async def test_a_page_converts_as_page_text_does(pool: Callable[..., PageConverter]) -> None:
    converter = pool()
    assert converter.workers == 0  # nothing starts before the first page
    html = normal_page(20_000)
    assert await converter.html_text(html, "text/html") == page_text(html, "text/html")
    assert converter.started == 1 and converter.workers == 1
    body = "<p>caf\u00e9</p>".encode("cp1252")
    assert await converter.body_text(body, "text/html; charset=windows-1252") == "caf\u00e9"


async def test_a_slow_page_is_killed_at_its_deadline_and_the_worker_replaced(
    pool: Callable[..., PageConverter],
) -> None:
    converter = pool()
    t0 = time.monotonic()
    got = await asyncio.wait_for(converter.html_text(HOSTILE, "text/html"), NO_HANG_S)
    took = time.monotonic() - t0
    assert got == ConvertFailed(
        message="converting the page to text took longer than 1 s ([web_fetch] "
        "convert_timeout_s) and was stopped: its HTML is likely nested very deeply. Try a "
        "plain-text or raw version of the page, a more specific URL, or an API that answers "
        "with JSON."
    )
    assert took < TIMEOUT_S + SLACK_S + 1.0  # the worker's start is in there too
    assert converter.killed == 1 and converter.workers == 0
    assert await converter.html_text("<p>next</p>", "text/html") == "next"
    assert converter.started == 2


async def test_a_page_too_large_is_refused_before_any_worker_starts(
    pool: Callable[..., PageConverter],
) -> None:
    converter = pool(max_bytes=10_000)
    got = await converter.html_text("<p>" + "x" * 20_000, "text/html")
    assert got == ConvertFailed(
        message="the page is too large to convert to text: 20,003 characters, and the server "
        "converts at most 10,000 bytes ([web_fetch] convert_max_bytes). Try a more specific "
        "URL (one section or one page of it), a plain-text or raw version, or an API that "
        "answers with JSON."
    )
    assert isinstance(await converter.body_text(b"x" * 10_001, "text/plain"), ConvertFailed)
    assert converter.started == 0


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_every_page_shape_is_bounded_in_time(
    pool: Callable[..., PageConverter], shape: str
) -> None:
    """Each shape at 1 MB: text, or the deadline's error, never later than the deadline."""
    converter = pool()
    await converter.html_text("<p>warm</p>", "text/html")  # the start is not the page's time
    html = page(shape, 1_000_000)
    t0 = time.monotonic()
    got = await asyncio.wait_for(converter.html_text(html, "text/html"), NO_HANG_S)
    took = time.monotonic() - t0
    assert took < TIMEOUT_S + SLACK_S, (shape, took)
    if isinstance(got, ConvertFailed):
        assert "took longer than 1 s" in got.message
    else:
        assert got.strip()


async def test_a_worker_killed_while_idle_is_replaced(pool: Callable[..., PageConverter]) -> None:
    converter = pool()
    assert await converter.html_text("<p>one</p>", "text/html") == "one"
    (pid,) = converter.pids()
    os.kill(pid, signal.SIGKILL)
    await asyncio.sleep(0.2)
    assert await converter.html_text("<p>two</p>", "text/html") == "two"
    assert converter.started == 2 and converter.crashed == 1
    assert converter.pids() != [pid]


async def test_a_worker_killed_mid_page_fails_that_page_only(
    pool: Callable[..., PageConverter],
) -> None:
    converter = pool(timeout_s=30.0)
    await converter.html_text("<p>warm</p>", "text/html")
    (pid,) = converter.pids()
    task = asyncio.create_task(converter.html_text(HOSTILE, "text/html"))
    await asyncio.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    got = await asyncio.wait_for(task, 10)
    assert isinstance(got, ConvertFailed)
    assert got.message.startswith("the page converter stopped while reading this page (exit code")
    assert await converter.html_text("<p>after</p>", "text/html") == "after"


async def test_a_page_that_needs_too_much_memory_is_an_error(
    pool: Callable[..., PageConverter],
) -> None:
    converter = pool(memory_mb=200, timeout_s=30.0, max_bytes=50_000_000)
    got = await converter.html_text(page("many-small-nodes", 40_000_000), "text/html")
    assert got == ConvertFailed(
        message="converting the page to text needed more than 200 MB ([web_fetch] "
        "convert_memory_mb) and was stopped. Try a smaller or plain-text version of the page."
    )
    assert await converter.html_text("<p>fine</p>", "text/html") == "fine"


async def test_workers_are_bounded_and_waiting_pages_too(
    pool: Callable[..., PageConverter],
) -> None:
    converter = pool(workers=2, max_waiting=2)
    seen: set[int] = set()

    async def watch() -> None:
        while True:
            seen.update(converter.pids())
            assert converter.workers <= 2
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    try:
        pages = (converter.html_text(HOSTILE, "text/html") for _ in range(6))
        results = await asyncio.gather(*pages)
    finally:
        watcher.cancel()
    busy = [r for r in results if isinstance(r, ConvertFailed) and "try again" in r.message]
    slow = [r for r in results if isinstance(r, ConvertFailed) and "took longer" in r.message]
    assert len(busy) == 2 and len(slow) == 4  # 2 run, 2 wait, 2 refused at once
    assert busy[0].message == (
        "the server is converting 2 other pages and 2 more wait; try again in a moment"
    )
    assert len(seen) <= 4  # two rounds of two workers, each killed at its deadline


async def test_a_cancelled_conversion_kills_its_worker(pool: Callable[..., PageConverter]) -> None:
    converter = pool(timeout_s=30.0)
    await converter.html_text("<p>warm</p>", "text/html")
    (pid,) = converter.pids()
    task = asyncio.create_task(converter.html_text(HOSTILE, "text/html"))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(pid)
    assert await converter.html_text("<p>again</p>", "text/html") == "again"


async def test_closing_ends_every_worker_idle_or_busy() -> None:
    converter = PageConverter(ConvertLimits(workers=2, timeout_s=30.0))
    await asyncio.gather(*(converter.html_text("<p>x</p>", "text/html") for _ in range(2)))
    busy = asyncio.create_task(converter.html_text(HOSTILE, "text/html"))
    await asyncio.sleep(0.3)
    pids = converter.pids()
    assert len(pids) == 2
    await converter.aclose()
    got = await asyncio.wait_for(busy, 10)
    assert isinstance(got, ConvertFailed)
    assert not any(alive(pid) for pid in pids)
    assert await converter.html_text("<p>late</p>", "text/html") == ConvertFailed(
        message="the server is shutting down; the page was not read"
    )


@pytest.mark.parametrize(
    ("content_type", "body", "text"),
    [
        ("text/html; charset=undefined", b"<p>caf\xc3\xa9</p>", "caf\u00e9"),  # raised before
        ("text/html; charset=rot13", b"<p>abc</p>", "abc"),  # a codec, but not of text
        ("text/html; charset=unicode_escape", b"<p>a\\x41</p>", "a\\x41"),  # not read as escapes
        ("text/html; charset=x-no-such-thing", b"<p>ok</p>", "ok"),
        ("text/html; charset=", b"<p>ok</p>", "ok"),
        ("text/html; charset=utf-8", b"<p>caf\xc3\xa9 caf\xe9</p>", "caf\u00e9 caf\ufffd"),  # mixed
        ("text/html; charset=utf-16", b"<\x00p\x00>\x00h\x00i\x00", "hi"),
        ("text/html; charset=iso-8859-1", b"<p>\x93q\x94</p>", "\u201cq\u201d"),  # as cp1252
        ("text/html", b'<meta charset="koi8-r"><p>\xf0\xd2\xc9</p>', "\u041f\u0440\u0438"),
        ("text/plain; charset=undefined", b"plain \xff", "plain \ufffd"),
        ("text/html; charset=utf-8", b"\xef\xbb\xbf<p>bom</p>", "bom"),
    ],
)
async def test_no_charset_raises(
    pool: Callable[..., PageConverter], content_type: str, body: bytes, text: str
) -> None:
    assert await pool().body_text(body, content_type) == text
