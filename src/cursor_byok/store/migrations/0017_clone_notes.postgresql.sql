-- 0017 for PostgreSQL: 0017_clone_notes.sql with PostgreSQL's types (no STRICT; times in
-- milliseconds need BIGINT).
CREATE TABLE clone_notes (
    conversation_id         TEXT PRIMARY KEY,
    source_conversation_id  TEXT NOT NULL,
    created_at_ms           BIGINT NOT NULL
);
