-- 0018 for PostgreSQL: 0018_run_waits.sql with PostgreSQL's types.
CREATE TABLE run_waits (
    request_id     TEXT PRIMARY KEY,
    client         TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL
);
CREATE INDEX run_waits_by_client ON run_waits (client, created_at_ms);
