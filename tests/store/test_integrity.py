"""The quick integrity check before serving: it finds a corrupted page, names no false damage,
and stops at its time bound however large the file (docs/store.md, "The check at start")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cursor_byok.store.sqlite import QuickCheckOutcome, quick_check
from tests.support.databases import build_database, corrupt_middle_page


def test_a_healthy_file_is_ok(tmp_path: Path) -> None:
    db = tmp_path / "ok.db"
    size = build_database(db, conversations=40)
    check = quick_check(str(db), 10.0)
    assert check.outcome is QuickCheckOutcome.OK, check
    assert check.size_bytes == size and check.problem == ""


@pytest.mark.parametrize("fill", [b"\xde\xad\xbe\xef", b"\x00"], ids=["garbage", "zeros"])
def test_a_corrupted_middle_page_is_damage(tmp_path: Path, fill: bytes) -> None:
    db = tmp_path / "damaged.db"
    build_database(db, conversations=40)
    before = db.read_bytes()
    corrupt_middle_page(db, fill)
    damaged = db.read_bytes()
    check = quick_check(str(db), 10.0)
    assert check.outcome is QuickCheckOutcome.DAMAGED, check
    assert check.problem and "\n" not in check.problem and len(check.problem) <= 300
    assert db.read_bytes() == damaged != before  # read-only: the check changed nothing


def test_not_a_database_is_damage_and_a_missing_file_is_nothing_to_check(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a sqlite database " * 200)
    check = quick_check(str(garbage), 10.0)
    assert check.outcome is QuickCheckOutcome.DAMAGED and "not a database" in check.problem
    missing = quick_check(str(tmp_path / "missing.db"), 10.0)
    assert missing.outcome is QuickCheckOutcome.NO_FILE
    assert not (tmp_path / "missing.db").exists()  # the check does not create it


def test_the_time_bound_cuts_a_large_check_short(tmp_path: Path) -> None:
    """SQLite walks the b-trees in one VDBE instruction: a progress handler is not called
    during the walk on SQLite before 3.43, interrupt() is. The bound holds within a margin
    wide enough for a loaded machine."""
    db = tmp_path / "large.db"
    build_database(db, messages=40_000)  # ~55 MB: a full check takes ~0.1 s or more
    t0 = time.monotonic()
    full = quick_check(str(db), 60.0)
    full_s = time.monotonic() - t0
    assert full.outcome is QuickCheckOutcome.OK, full
    t0 = time.monotonic()
    cut = quick_check(str(db), 0.001)
    cut_s = time.monotonic() - t0
    print(f"quick_check of {full.size_bytes / 1e6:.0f} MB: {full_s:.3f} s; cut at {cut_s:.4f} s")
    assert cut.outcome is QuickCheckOutcome.CUT_SHORT, cut
    assert cut_s < 0.5


def test_a_bound_that_passes_before_the_check_starts_still_cuts_it_short(tmp_path: Path) -> None:
    """sqlite3_interrupt is a no-op while no statement runs: a bound that has passed before the
    statement starts must still stop it (the watchdog repeats the interrupt). A single
    interrupt at 0 s is lost; this failed on a fresh clone's CI run as a flaky start test."""
    db = tmp_path / "large.db"
    build_database(db, messages=40_000)
    for _ in range(5):
        cut = quick_check(str(db), 0.0)
        assert cut.outcome is QuickCheckOutcome.CUT_SHORT, cut
