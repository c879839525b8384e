"""Composition root: build the pieces from the configuration and start serving."""

from __future__ import annotations

import sys

from .config import Config


def serve(
    config: Config, *, host: str | None = None, port: int | None = None, database: str | None = None
) -> int:
    print(
        "cursor-byok: configuration is valid "
        f"({len(config.models)} models, {len(config.providers)} providers); "
        "the Cursor transport is not built yet, so nothing is served.",
        file=sys.stderr,
    )
    return 0
