"""The asyncio runtime: it runs `transition`, commits, publishes and executes commands.

It imports the loop, the LLM adapters' interfaces, the store and the Cursor dialect, never
protobuf (an import contract checks it). `Runner` is the transport's run handler; each client
stream is a `Run` (run.py), made by the factory `new_runner` gives the runner (the runner sits
below the run and never imports it). Around the loop a run has: the parts its run request
decides (run_parts.py), its turn's Start (starts.py), its commits (commits.py), what it sends
(publish.py), its commands (commands.py), its helpers (run_helpers.py), its model calls
(calls.py), its tool calls (tools.py), what it asks its client (requests.py), its context
(context.py), checkpoints (checkpoints.py), the records it stores (records.py) and the caches
shared by every run (committed_states.py, client_blobs.py, request_bases.py).
"""

from .run import new_runner
from .runner import Runner
from .services import RunnerServices, wall_ms
from .summary import CacheStats, RunSummary

__all__ = ["CacheStats", "RunSummary", "Runner", "RunnerServices", "new_runner", "wall_ms"]
