-- 0011 for PostgreSQL: 0011_call_ends_and_leases.sql with PostgreSQL's types (no STRICT;
-- times in milliseconds need BIGINT).
ALTER TABLE llm_calls ADD COLUMN process_id TEXT;
ALTER TABLE llm_calls ADD COLUMN estimated_tokens TEXT;
CREATE INDEX llm_calls_planned ON llm_calls (process_id) WHERE status = 'planned';

CREATE TABLE process_leases (
    process_id     TEXT PRIMARY KEY,
    host           TEXT NOT NULL,
    pid            BIGINT NOT NULL,
    pid_started    BIGINT NOT NULL,
    started_at_ms  BIGINT NOT NULL,
    renewed_at_ms  BIGINT NOT NULL,
    expires_at_ms  BIGINT NOT NULL,
    ended_at_ms    BIGINT
);
