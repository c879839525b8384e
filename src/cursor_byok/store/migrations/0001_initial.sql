-- 0001: initial schema (design §13.1, with messages in their own append-only table).
-- Applied inside one transaction by cursor_byok.store.migrate; PRAGMA user_version records it.

CREATE TABLE conversations (
    conversation_id TEXT PRIMARY KEY,
    version         INTEGER NOT NULL CHECK (version >= 1),
    state           BLOB NOT NULL,
    message_count   INTEGER NOT NULL CHECK (message_count >= 0),
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL
) STRICT;

CREATE INDEX conversations_by_update ON conversations (updated_at_ms);

-- The model history: one row per canonical message, appended at seq = message_count.
-- Rows are never updated; they are deleted only by a recorded rewind (message_rewinds).
CREATE TABLE messages (
    conversation_id   TEXT NOT NULL REFERENCES conversations (conversation_id),
    seq               INTEGER NOT NULL CHECK (seq >= 0),
    appended_version  INTEGER NOT NULL,
    body              BLOB NOT NULL,
    PRIMARY KEY (conversation_id, seq)
) STRICT;

CREATE TABLE message_rewinds (
    conversation_id  TEXT NOT NULL REFERENCES conversations (conversation_id),
    version          INTEGER NOT NULL,
    keep             INTEGER NOT NULL CHECK (keep >= 0),
    previous_count   INTEGER NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, version)
) STRICT;

CREATE TRIGGER messages_no_update BEFORE UPDATE ON messages
BEGIN
    SELECT RAISE(ABORT, 'messages are append-only: no update');
END;

CREATE TRIGGER messages_no_gap BEFORE INSERT ON messages
WHEN NEW.seq > 0 AND NOT EXISTS (
    SELECT 1 FROM messages WHERE conversation_id = NEW.conversation_id AND seq = NEW.seq - 1
)
BEGIN
    SELECT RAISE(ABORT, 'messages are append-only: gap in seq');
END;

CREATE TRIGGER messages_delete_only_by_rewind BEFORE DELETE ON messages
WHEN NOT EXISTS (
    SELECT 1
    FROM message_rewinds AS r
    JOIN conversations AS c
      ON c.conversation_id = r.conversation_id AND c.version = r.version
    WHERE r.conversation_id = OLD.conversation_id AND OLD.seq >= r.keep
)
BEGIN
    SELECT RAISE(ABORT, 'messages are append-only: delete only through a rewind');
END;

CREATE TABLE input_commits (
    conversation_id    TEXT NOT NULL REFERENCES conversations (conversation_id),
    input_id           TEXT NOT NULL,
    committed_version  INTEGER NOT NULL,
    result             BLOB NOT NULL,
    created_at_ms      INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, input_id)
) STRICT;

CREATE TABLE llm_calls (
    call_id             TEXT PRIMARY KEY,
    conversation_id     TEXT NOT NULL REFERENCES conversations (conversation_id),
    turn_id             TEXT NOT NULL,
    request             BLOB NOT NULL,
    request_hash        TEXT NOT NULL,
    messages_hash       TEXT NOT NULL,
    status              TEXT NOT NULL
        CHECK (status IN ('planned', 'streaming', 'committed', 'failed', 'canceled')),
    assistant_hash      TEXT,
    provider            TEXT,
    model               TEXT,
    api                 TEXT,
    input_tokens        INTEGER,
    output_tokens       INTEGER,
    cache_read_tokens   INTEGER,
    cache_write_tokens  INTEGER,
    reasoning_tokens    INTEGER,
    ttft_ms             INTEGER,
    duration_ms         INTEGER,
    cost_usd            REAL,
    error               TEXT,
    created_at_ms       INTEGER NOT NULL,
    finished_at_ms      INTEGER
) STRICT;

CREATE INDEX llm_calls_by_time ON llm_calls (created_at_ms);
CREATE INDEX llm_calls_by_conversation ON llm_calls (conversation_id, created_at_ms);

CREATE TABLE client_operations (
    operation_id     TEXT PRIMARY KEY,
    conversation_id  TEXT NOT NULL REFERENCES conversations (conversation_id),
    turn_id          TEXT NOT NULL,
    tool_call_id     TEXT NOT NULL,
    tool_index       INTEGER NOT NULL,
    tool_name        TEXT NOT NULL,
    side_effects     INTEGER NOT NULL CHECK (side_effects IN (0, 1)),
    request          BLOB NOT NULL,
    result           BLOB,
    status           TEXT NOT NULL
        CHECK (status IN ('planned', 'sent', 'completed', 'canceled', 'unknown')),
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    CHECK (status <> 'completed' OR result IS NOT NULL)
) STRICT;

CREATE INDEX client_operations_by_conversation ON client_operations (conversation_id);

-- Optional debugging aid: raw stream events of a call. Never read back into messages.
CREATE TABLE stream_diagnostics (
    call_id      TEXT NOT NULL REFERENCES llm_calls (call_id),
    event_index  INTEGER NOT NULL CHECK (event_index >= 0),
    event        BLOB NOT NULL,
    PRIMARY KEY (call_id, event_index)
) STRICT;
