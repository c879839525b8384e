"""How long the transport waits for a run and how much it holds for it (sessions.py, ledger.py).

The composition root sets some of these from `[server]` (launch.transport_limits); the table in
docs/operations.md, "Limits and deadlines", says what happens past each.
"""

from __future__ import annotations

from dataclasses import dataclass

from .envelopes import DEFAULT_MAX_FRAME
from .ledger import MIB


@dataclass(frozen=True, slots=True)
class TransportLimits:
    heartbeat_interval: float = 5.0  # server heartbeat after this much output silence
    finished_grace: float = 120.0  # finished sessions stay replayable this long
    # A live run with no subscriber this long (a RunSSE's reconnect grace, design §14.2) is
    # told its client is gone (it ends by itself), or cancelled when it does not watch.
    orphan_timeout: float = 60.0
    # A run told its client is gone, or that the server stops, has this long to end by
    # itself (recording its calls); then its task is cancelled.
    stop_grace: float = 5.0
    reap_interval: float = 1.0
    max_sessions: int = 10_000
    max_held_appends: int = 1024  # out-of-order appends held per session
    max_held_bytes: int = 64 * MIB  # ... and their bytes
    max_output_bytes: int = 256 * MIB  # one run's output, kept for replay
    max_buffered_bytes: int = 1024 * MIB  # every run together (ledger.py)
    unstarted_timeout: float = 10.0  # a run with no message in order yet is dropped
    max_unstarted_per_client: int = 64  # runs of one client waiting for their first message
    max_unstarted_bytes_per_client: int = 128 * MIB  # ... and what they hold
    max_frame_size: int = DEFAULT_MAX_FRAME
    max_unary_body: int = 2 * DEFAULT_MAX_FRAME + 4096  # hex doubles the payload
    first_message_timeout: float = 60.0  # a `Run` stream that sends no frame is ended
