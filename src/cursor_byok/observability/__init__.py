"""Observability: Prometheus metrics, one log line per run, secret redaction, the dashboard.

Nothing here decides anything for a run; the transport layer calls in through the runner's
`on_llm_call` / `on_run_end` hooks and the server mounts `/metrics` and `/dashboard`.
"""
