"""heap.settle: what start-up made is frozen and young collections come less often. Run in a
child interpreter: freezing this test process would change every test after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import gc, sys
sys.path.insert(0, sys.argv[1])
from cursor_byok import heap
assert gc.get_freeze_count() == 0
made_at_start = [[n] for n in range(5000)]  # tracked containers alive at start-up
heap.settle()
frozen = gc.get_freeze_count()
assert frozen >= 5000, frozen
assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, *heap.OLDER_RATIOS), gc.get_threshold()
walked = []
gc.callbacks.append(lambda phase, info: phase == "stop" and walked.append(info["collected"]))
gc.collect()  # a full collection no longer walks the frozen objects, nor frees them
assert gc.get_freeze_count() == frozen
assert len(made_at_start) == 5000
print("ok", frozen)
"""


def test_settle_freezes_start_up_and_raises_the_young_threshold() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO / "src")],
        capture_output=True,
        text=True,
        timeout=60,
        env={},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")


def test_the_server_settles_its_heap_once_it_listens() -> None:
    """app._serve calls heap.settle from its `listening` callback (read from the source: a
    served process is what the benchmarks measure, docs/benchmarks-server.md)."""
    source = (REPO / "src" / "cursor_byok" / "app.py").read_text()
    listening = source.split("def listening() -> None:", 1)[1].split("\n\n", 1)[0]
    assert "heap.settle" in listening
