-- 0002 for PostgreSQL: 0002_runs_and_turn_marks.sql with PostgreSQL's types.
CREATE TABLE runs (
    request_id      TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    request         BYTEA NOT NULL,
    created_at_ms   BIGINT NOT NULL
);

CREATE INDEX runs_by_conversation ON runs (conversation_id);

CREATE TABLE turn_marks (
    conversation_id TEXT NOT NULL,
    turn            BIGINT NOT NULL CHECK (turn >= 1),
    blob_id         BYTEA NOT NULL,
    message_count   BIGINT NOT NULL CHECK (message_count >= 0),
    created_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, turn)
);
