"""WebFetch's HTML to text, on the event loop (as on 7a7e237) against the worker pool
(web/convert.py): per hostile page shape and size, the time the conversion took and the time
it held the event loop; and the pool's cost per normal page.

    .venv/bin/python bench/page_convert.py [--sizes 20000,80000,320000] [--timeout 5]

"on the loop" is `page_text` called in this process: the whole conversion holds the loop.
"pool" is `PageConverter.html_text`: its wall time (the worker's conversion, the pipe both
ways, killed at the deadline) and this process's CPU time for it (encoding, the pipe, the
reply), which is what the event loop pays. Results go to stdout as a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.hostile_pages import SHAPES, normal_page, page

from cursor_byok.web.convert import ConvertFailed, ConvertLimits, PageConverter
from cursor_byok.web.page_text import page_text

# On the loop, a page slower than this is not run again at the next size (it only grows).
ON_LOOP_GIVE_UP_S = 60.0


def on_loop(html: str) -> float:
    t0 = time.perf_counter()
    page_text(html, "text/html")
    return time.perf_counter() - t0


async def in_pool(converter: PageConverter, html: str) -> tuple[float, float, bool]:
    cpu0, t0 = time.process_time(), time.perf_counter()
    got = await converter.html_text(html, "text/html")
    return time.perf_counter() - t0, time.process_time() - cpu0, isinstance(got, ConvertFailed)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20000,80000,320000")
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--normal-runs", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    converter = PageConverter(ConvertLimits(timeout_s=args.timeout))
    await converter.html_text("<p>warm</p>", "text/html")
    print(f"deadline {args.timeout:g} s\n")
    print("| shape | size | on the loop | pool: wall | pool: loop CPU |")
    print("| --- | --- | --- | --- | --- |")
    for shape in SHAPES:
        given_up = False
        for size in sizes:
            html = page(shape, size)
            before = "not run (the smaller page took > 60 s)" if given_up else ""
            if not given_up:
                took = on_loop(html)
                given_up = took > ON_LOOP_GIVE_UP_S
                before = f"{took * 1000:,.0f} ms"
            wall, cpu, killed = await in_pool(converter, html)
            after = f"{wall * 1000:,.0f} ms" + (" (killed at the deadline)" if killed else "")
            kb = len(html) // 1000
            print(f"| {shape} | {kb} kB | {before} | {after} | {cpu * 1000:.1f} ms |", flush=True)
    for size in (20_000, 60_000, 500_000):
        html = normal_page(size)
        loops = [on_loop(html) for _ in range(args.normal_runs)]
        pools = [await in_pool(converter, html) for _ in range(args.normal_runs)]
        loop_ms = statistics.median(loops) * 1000
        wall_ms = statistics.median(w for w, _, _ in pools) * 1000
        cpu_ms = statistics.median(c for _, c, _ in pools) * 1000
        print(
            f"| normal page (median of {args.normal_runs}) | {len(html) // 1000} kB | "
            f"{loop_ms:.1f} ms | {wall_ms:.1f} ms (+{wall_ms - loop_ms:.1f}) | {cpu_ms:.2f} ms |",
            flush=True,
        )
    t0 = time.perf_counter()
    cold = PageConverter()
    await cold.html_text("<p>x</p>", "text/html")
    started_ms = (time.perf_counter() - t0) * 1000
    print(f"\na worker's start (the first page, or after a kill): {started_ms:.0f} ms")
    await cold.aclose()
    await converter.aclose()


if __name__ == "__main__":
    asyncio.run(main())
