-- 0009: the shim's client messages (BidiAppend), stored before they are acknowledged, so a
-- replica other than the one that received an append can deliver it to the run it belongs to
-- (PostgreSQL replicas: docs/deploy.md, "Replicas"). Keyed by the run's request id and the
-- client's append_seqno: a message sent twice is stored once. Opaque to the store. SQLite
-- has the table (one numbered list serves both backends) and leaves it empty.
CREATE TABLE run_appends (
    request_id     TEXT NOT NULL,
    seqno          INTEGER NOT NULL CHECK (seqno >= 0),
    payload        BLOB NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (request_id, seqno)
) STRICT;
