"""bench/run on a scratch copy of bench/ holding three fake benchmarks (one fails)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[2] / "bench" / "run"


def test_bench_run_collects_results_and_reports_failures(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    shutil.copy(RUNNER, bench / "run")
    (bench / "a_fast.py").write_text(
        "import sys\n"
        "print('| x | y |\\n|---|---|\\n| 1 | 2 |')\n"
        "print('working', file=sys.stderr)\n"
    )
    (bench / "b_broken.py").write_text(
        "import sys\nprint('partial')\nprint('boom: it broke', file=sys.stderr)\nsys.exit(3)\n"
    )
    (bench / "c_last.py").write_text("print('## last section')\n")
    (bench / "_helper.py").write_text("raise SystemExit('helpers are not benchmarks')\n")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    proc = subprocess.run(
        [sys.executable, str(bench / "run")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr
    assert "[1/3] a_fast.py" in proc.stderr and "[3/3] c_last.py" in proc.stderr
    assert "  | working" in proc.stderr  # each bench's own stderr is shown as progress
    assert "FAILED: b_broken.py" in proc.stderr

    results = (bench / "RESULTS.md").read_text()
    assert results.startswith("# Benchmark results")
    for field in ("| date |", "| machine |", "cores", "| python |"):
        assert field in results
    assert "| a_fast.py | ok |" in results
    assert "| b_broken.py | failed (exit 3) |" in results
    assert "| c_last.py | ok |" in results
    assert "| 1 | 2 |" in results and "## last section" in results
    assert "boom: it broke" in results  # a failure keeps the end of its stderr
    assert "_helper" not in results

    proc = subprocess.run(
        [sys.executable, str(bench / "run"), "c_last"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    # Named benchmarks replace their own sections; the others' are kept, marked with the run
    # that wrote them (so `bench/run NAME` updates one section of bench/RESULTS.md).
    second = (bench / "RESULTS.md").read_text()
    first_date = results.split("| date | ", 1)[1].split(" |", 1)[0]
    assert second.index("| c_last.py | ok |") < second.index("| a_fast.py | ok |")
    assert "| b_broken.py | failed (exit 3) |" in second
    assert second.count("## a_fast.py") == 1 and "| 1 | 2 |" in second
    assert f"_kept from an earlier run: {first_date}, commit " in second
    assert second.count("_kept from an earlier run") == 2  # a_fast and b_broken, not c_last
    assert "boom: it broke" in second

    # Kept again by a later named run: still marked once, with the run that wrote it.
    proc = subprocess.run(
        [sys.executable, str(bench / "run"), "c_last"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    third = (bench / "RESULTS.md").read_text()
    assert third.count("_kept from an earlier run") == 2
    assert f"_kept from an earlier run: {first_date}, commit " in third
    assert third.count("## c_last.py") == 1 and third.count("## a_fast.py") == 1
