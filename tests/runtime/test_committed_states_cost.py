"""The committed-states cache counts what its entries cost in memory (issue 27, point 7).

Counted at the stored bytes alone, an entry of a one-turn conversation was about 270 B while
its decoded state held about 720 B of objects: a soak of new conversations grew RSS by 2.8 KB
per turn with the cache's gauge nearly still, and its 64 MiB cap would have let some 600 MB
in. Here
real turns go through a real server (one new conversation each) and the memory the cache's
entries hold (what tracemalloc sees freed when they are dropped) must not exceed what the
cache counts.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from cursor_byok.app import App
from cursor_byok.config import parse_config
from cursor_byok.launch import running_server
from tests.e2e.test_crash_recovery import complete_turn
from tests.e2e.test_store_failures import run_request
from tests.support.live import ThreadedUpstream, brain_config

TURNS = 40


async def test_the_cache_counts_at_least_the_memory_its_entries_hold(tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        with ThreadedUpstream() as upstream:
            config = parse_config(brain_config(upstream.base_url, db=tmp_path / "c.db"))
            app = await App.open(config)
            try:
                async with running_server(config, app.runner.handle) as srv:
                    for n in range(TURNS):
                        conv = f"cost-{n}"
                        await complete_turn(srv.base_url, f"r-{n}", run_request(conv, f"hi {n}"))
            finally:
                await app.close()  # the runs and sessions that also held the states are gone
        states = app.runner.committed_states
        assert len(states) == TURNS
        counted = states.size
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for n in range(TURNS):
            states.forget(f"cost-{n}")
        gc.collect()
        freed = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert states.size == 0
    per_entry = freed / TURNS
    # Not vacuous: what an entry holds is well above its stored bytes (about 270 B here; the
    # objects freed about 720 B, and the soak's RSS grew 2.8 KB a turn: allocator overhead and
    # what tracemalloc does not see, which the count's 2.5 KiB per entry covers).
    assert per_entry > 500, per_entry
    assert counted >= freed, (counted / TURNS, per_entry)
    assert counted <= 6 * freed, (counted / TURNS, per_entry)  # and not wildly more
