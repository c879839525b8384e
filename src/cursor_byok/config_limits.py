"""The checks of `[server]`'s limits on what runs hold and how many processes serve (kept
apart from config.py, which holds the configuration's types and loading)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import ServerConfig


def run_limit_errors(server: ServerConfig) -> list[str]:
    errors = [
        f"server.{key} must be 1-1048576 (MiB)"
        for key in ("run_held_appends_mib", "run_output_mib", "runs_memory_mib")
        if not 1 <= getattr(server, key) <= 1_048_576
    ]
    if not 1 <= server.unstarted_mib_per_client <= 1_048_576:
        errors.append("server.unstarted_mib_per_client must be 1-1048576 (MiB)")
    if not 0 < server.unstarted_run_timeout_s <= 3600:
        errors.append("server.unstarted_run_timeout_s must be between 0 and 3600")
    if not 1 <= server.unstarted_runs_per_client <= 100_000:
        errors.append("server.unstarted_runs_per_client must be 1-100000")
    if not 0 < server.reconnect_grace_s <= 86_400:
        errors.append("server.reconnect_grace_s must be between 0 and 86400")
    if not 0 <= server.database_max_mib <= 1 << 30:
        errors.append("server.database_max_mib must be 0-1073741824 (MiB; 0: no cap)")
    if not 1 <= server.workers <= 64:
        errors.append("server.workers must be 1-64")
    return errors
