"""The quick integrity check run before a server starts on a database: SQLite's
`PRAGMA quick_check`, bounded in time. It reports; the caller decides what to do about it.

Why quick_check: it reads every page of the file and checks each b-tree's structure (what a
corrupted page breaks), but skips what `integrity_check` adds (index entries against their rows),
so its cost grows with the pages alone. `cursor-byok doctor` runs the full `integrity_check`.

Why a bound, and why `interrupt()` from a timer rather than a progress handler: the check reads
the whole file, which from a cold disk can take minutes for a large one. SQLite walks the b-trees
inside one VDBE instruction, and before SQLite 3.43 no progress handler runs during that walk
(measured on 3.40.1 with a 210 MB file: the first callback came after the whole walk), so a
progress handler could not stop the part that grows with the file. `sqlite3_interrupt`, which
`Connection.interrupt()` calls, is honoured for every page the walk visits.
"""

from __future__ import annotations

import enum
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import CORRUPT, NOTADB, map_error, primary

INTERRUPT = 9  # SQLITE_INTERRUPT
_FINDINGS = 5  # SQLite's first findings are enough to name the problem
_MAX_PROBLEM = 300  # characters of them kept for the one-line message


class QuickCheckOutcome(enum.Enum):
    NO_FILE = "no file"  # nothing to check: the store creates the database
    OK = "ok"
    DAMAGED = "damaged"
    CUT_SHORT = "cut short"  # the time bound ran out first: neither ok nor damaged is known


@dataclass(frozen=True, slots=True)
class QuickCheck:
    outcome: QuickCheckOutcome
    elapsed_s: float
    size_bytes: int
    problem: str = ""  # DAMAGED: what SQLite found, on one line


def quick_check(path: str, budget_s: float, *, busy_timeout_ms: int = 5000) -> QuickCheck:
    """Run `PRAGMA quick_check` on the file at `path`, read-only, for at most `budget_s` seconds.

    A file SQLite finds malformed, or that is not a database at all, is DAMAGED. Any other
    failure (permissions, I/O, a lock held beyond `busy_timeout_ms`) raises the StoreError the
    store itself would raise on opening the file."""
    target = Path(os.path.abspath(path))
    if not target.is_file():
        return QuickCheck(QuickCheckOutcome.NO_FILE, 0.0, 0)
    size = target.stat().st_size
    t0 = time.monotonic()
    try:
        conn = sqlite3.connect(
            f"{target.as_uri()}?mode=ro",
            uri=True,
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,  # interrupt() comes from the timer's thread
        )
    except sqlite3.Error as exc:
        raise map_error(
            exc, str(target), "checking the database", busy_timeout_ms=busy_timeout_ms
        ) from None
    watchdog = _Watchdog(conn, budget_s)
    findings: list[str] = []  # kept row by row: a malformed page may raise after some
    try:
        for row in conn.execute(f"PRAGMA quick_check({_FINDINGS})"):
            findings.append(str(row[0]))
    except sqlite3.Error as exc:
        code = primary(exc)
        if code == INTERRUPT and watchdog.fired:
            return QuickCheck(QuickCheckOutcome.CUT_SHORT, time.monotonic() - t0, size)
        if code not in (CORRUPT, NOTADB):
            raise map_error(
                exc, str(target), "checking the database", busy_timeout_ms=busy_timeout_ms
            ) from None
        findings.append(str(exc))
    finally:
        watchdog.disarm()
        conn.close()
    elapsed = time.monotonic() - t0
    if findings == ["ok"]:
        return QuickCheck(QuickCheckOutcome.OK, elapsed, size)
    return QuickCheck(QuickCheckOutcome.DAMAGED, elapsed, size, _one_line(findings))


def _one_line(findings: list[str]) -> str:
    text = "; ".join(" ".join(finding.split()) for finding in findings) or "no result"
    return text if len(text) <= _MAX_PROBLEM else text[: _MAX_PROBLEM - 3] + "..."


class _Watchdog:
    """Interrupts the connection's statement once `budget_s` has passed, unless disarmed first.

    `sqlite3_interrupt` is a no-op while no statement runs, so a budget shorter than the time
    it takes the check to start would be lost: past the budget the interrupt is repeated every
    few milliseconds until the check ends. The lock keeps `interrupt()` from racing with
    `close()`."""

    _REPEAT_S = 0.005

    def __init__(self, conn: sqlite3.Connection, budget_s: float) -> None:
        self.fired = False
        self._conn = conn
        self._lock = threading.Lock()
        self._armed = True
        self._done = threading.Event()
        self._budget_s = budget_s
        self._thread = threading.Thread(target=self._watch, name="quick-check-bound", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        if self._done.wait(self._budget_s):
            return
        while not self._done.is_set():
            with self._lock:
                if not self._armed:
                    return
                self.fired = True
                self._conn.interrupt()
            self._done.wait(self._REPEAT_S)

    def disarm(self) -> None:
        with self._lock:
            self._armed = False
        self._done.set()
