-- 0009 for PostgreSQL: 0009_run_appends.sql with PostgreSQL's types.
CREATE TABLE run_appends (
    request_id     TEXT NOT NULL,
    seqno          BIGINT NOT NULL CHECK (seqno >= 0),
    payload        BYTEA NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (request_id, seqno)
);
