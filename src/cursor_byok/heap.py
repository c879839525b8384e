"""The cyclic garbage collector, set for a server: what start-up made is frozen, and young
objects are collected less often.

Why: a turn allocates thousands of small containers (protobuf messages, msgspec structs,
dicts), nearly all freed by reference counting; the collector still walks every tracked
object it finds at each collection, and a full collection walks the whole heap (about 90,000
objects after start-up, most of them modules, descriptors and the configuration, which live
as long as the process). Measured on one-call turns (docs/benchmarks-server.md, "Issue 28,
sixth pass"): the default thresholds cost about 0.24 ms per turn, and each full collection
stalled one turn for 15 ms.

- `settle()` once the server listens: a full collection, then `gc.freeze()`, which moves
  every object alive then into a generation no collection walks again.
- `YOUNG_THRESHOLD`: a collection of the youngest generation after this many more
  allocations than frees of tracked objects (CPython's default is 700); the older
  generations keep their ratios (10 and 10). Garbage held only by cycles lives that much
  longer, which is bounded: a cycle is freed at the latest by the next full collection.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
OLDER_RATIOS = (10, 10)


def settle() -> None:
    """Freeze what is alive now and set the thresholds (idempotent; call once serving)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_RATIOS)


__all__ = ["OLDER_RATIOS", "YOUNG_THRESHOLD", "settle"]
