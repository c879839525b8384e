"""What a run handler is given besides its channel: which request started the run, over which
transport, with which forwarded headers and principal (sessions.py re-exports these names)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from .channel import RunChannel

Transport = Literal["run", "runsse"]

# Request headers passed on to the run handler (lower-case names).
FORWARDED_HEADERS = (
    "x-request-id",
    "x-original-request-id",
    "x-cursor-client-version",
    "x-cursor-client-type",
    "x-ghost-mode",
    "x-session-id",
    "x-parent-request-id",
    "x-parent-agent-tool-call-id",
    "x-root-parent-request-id",
    "user-agent",
)


# Set by ConnectApp (never taken from the client: it drops any it sent) to the principal a
# bearer credential authenticated as: the id of a person token, not its secret.
PRINCIPAL_HEADER = "x-cursor-byok-principal"


@dataclass(frozen=True, slots=True)
class RunStartInfo:
    """What the run handler learns about the request that started the run. `principal`: who
    the request authenticated as ("" for the server's own token, or none)."""

    request_id: str
    transport: Transport
    # Filled in by every request of the run until its first message is read (the shim's
    # RunSSE may come before the BidiAppend that carries a child run's parent headers).
    headers: dict[str, str] = field(default_factory=dict)
    principal: str = ""


RunHandler = Callable[[RunChannel, RunStartInfo], Awaitable[None]]
