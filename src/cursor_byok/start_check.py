"""The database check `serve` runs before it opens the store: a damaged file is refused in one
line (the caller exits with status 2), a check that ran out of time is a warning.

Without it a database with a corrupted page started serving, and the first run that touched the
page failed; only `cursor-byok doctor` said why.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import assert_never

from .config import Config
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


def moved_database(config: Config, cwd: Path | None = None) -> str | None:
    """Why not to open `server.database` (None: open it): a relative path is read beside the
    configuration file, and where none is there yet, the working directory holds a database
    by that name (where a relative path was read before): opening it would make an empty
    database and hide that one's history."""
    written = config.relative_database
    if written is None:
        return None
    resolved = Path(config.server.database)
    old = (cwd or Path.cwd()) / written
    if resolved.exists() or not old.is_file() or old.resolve() == resolved.resolve():
        return None
    return (
        f"server.database = {written!r} is read beside the configuration file: {resolved}, "
        f"which does not exist, while the working directory holds {old.resolve()} (where a "
        "relative path was read before). Move that file (with its -wal and -shm files) to "
        f"{resolved}, or set server.database to its absolute path"
    )
