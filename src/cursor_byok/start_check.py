"""The database check `serve` runs before it opens the store: a damaged file is refused in one
line (the caller exits with status 2), a check that ran out of time is a warning.

Without it a database with a corrupted page started serving, and the first run that touched the
page failed; only `cursor-byok doctor` said why.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import assert_never

from .store.sqlite import QuickCheckOutcome, quick_check

log = logging.getLogger("cursor_byok")


async def database_fit_to_serve(path: str, budget_s: float) -> bool:
    """Check the database at `path` for at most `budget_s` seconds (0: not at all); False, after
    logging the reason on one line, when it must not be served. Raises StoreError when the file
    cannot be read at all."""
    if budget_s <= 0:
        return True
    path = os.path.abspath(path)
    check = await asyncio.to_thread(quick_check, path, budget_s)
    match check.outcome:
        case QuickCheckOutcome.NO_FILE:
            return True
        case QuickCheckOutcome.OK:
            log.debug("database %s: integrity ok, checked in %.2f s", path, check.elapsed_s)
            return True
        case QuickCheckOutcome.DAMAGED:
            log.error(
                "the database %s is damaged (%s); not serving it. Run `cursor-byok doctor` for "
                "the full check, then restore a backup or move the file aside",
                path,
                check.problem,
            )
            return False
        case QuickCheckOutcome.CUT_SHORT:
            log.warning(
                "the integrity check of the database %s (%.0f MB) was cut short after %.2f s "
                "(the server.start_check_s bound); serving it unchecked. `cursor-byok doctor` "
                "runs the full check",
                path,
                check.size_bytes / 1e6,
                check.elapsed_s,
            )
            return True
        case _:
            assert_never(check.outcome)
