-- 0017 (renumber freely at merge: the loader wants 1..n): NotifyConversationClone's notes,
-- which conversation a new one was cloned from, kept in the database so that the clone's
-- first run finds its source on any process or replica (transport/runtime/forks.py).
--
-- Append-only: the first note of a conversation wins, a later one is ignored; no foreign
-- keys (the clone's conversation does not exist yet when its note is written).
CREATE TABLE clone_notes (
    conversation_id         TEXT PRIMARY KEY,
    source_conversation_id  TEXT NOT NULL,
    created_at_ms           INTEGER NOT NULL
) STRICT;
