-- 0018 (renumber freely at merge: the loader wants 1..n): the shim's runs whose RunSSE is open
-- on some replica or worker and that have not started, by client, so that the per-client bound
-- on runs waiting for their first message (`server.unstarted_runs_per_client`) holds across
-- every process on the database, not per process. One row per request id, written when its
-- RunSSE opens (in the transaction that reads its stored appends), counted only while younger
-- than the transport's unstarted timeout; swept with the append buffer. SQLite keeps it empty.
CREATE TABLE run_waits (
    request_id     TEXT PRIMARY KEY,
    client         TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL
);
CREATE INDEX run_waits_by_client ON run_waits (client, created_at_ms);
