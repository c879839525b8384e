"""The asyncio runtime: it runs `transition`, commits, publishes and executes commands.

It imports the loop, the LLM adapters' interfaces, the store and the Cursor dialect, never
protobuf (an import contract checks it). `Runner` is the transport's run handler; each client
stream is a `Run` (run.py). The rest holds what a run needs around the loop: its model calls
(calls.py), its tool call (tools.py), what it asks its client (requests.py), its context
(context.py), checkpoints (checkpoints.py), the records it stores (records.py) and the caches
shared by every run (committed_states.py, client_blobs.py, request_bases.py).
"""

from .runner import Runner, RunnerServices, wall_ms
from .summary import CacheStats, RunSummary

__all__ = ["CacheStats", "RunSummary", "Runner", "RunnerServices", "wall_ms"]
