-- 0011 (renumber freely at merge: the loader wants 1..n): how a model call ended before its
-- answer, and which server process owns the calls in flight.
--
-- `estimated_tokens`: which of the call's token counts are this server's estimates rather
-- than the provider's ('input', 'output' or 'input,output'; NULL: the provider's, or none):
-- a call canceled, superseded or shut down mid-answer has the provider's count only where one
-- came before the end (Anthropic's message_start, Gemini's usageMetadata), else the request's
-- estimate and the output counted from what streamed.
-- `process_id`: the server process that planned the call, or sends it again; with
-- `process_leases` it tells a call a live process still streams from one whose process died
-- (its lease expired): only those are marked at start-up, never a live sibling's.
ALTER TABLE llm_calls ADD COLUMN process_id TEXT;
ALTER TABLE llm_calls ADD COLUMN estimated_tokens TEXT;
CREATE INDEX llm_calls_planned ON llm_calls (process_id) WHERE status = 'planned';

-- One row per server process that has run on this database: it renews `expires_at_ms` while
-- it runs and sets `ended_at_ms` at a graceful stop. `host` says where `pid` means something
-- (a boot id and PID namespace on Linux); `pid_started` tells a reused pid apart.
CREATE TABLE process_leases (
    process_id     TEXT PRIMARY KEY,
    host           TEXT NOT NULL,
    pid            INTEGER NOT NULL,
    pid_started    INTEGER NOT NULL,
    started_at_ms  INTEGER NOT NULL,
    renewed_at_ms  INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL,
    ended_at_ms    INTEGER
) STRICT;
