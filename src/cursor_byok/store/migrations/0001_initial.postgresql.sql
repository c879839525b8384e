-- 0001 for PostgreSQL: the schema of 0001_initial.sql with PostgreSQL's types (BIGINT for
-- every integer SQLite keeps in 64 bits, BYTEA for BLOB, DOUBLE PRECISION for REAL) and the
-- append-only triggers as PL/pgSQL functions. Applied in one transaction by
-- cursor_byok.store.postgres.schema, which records the version in cursor_byok_schema.

CREATE TABLE conversations (
    conversation_id TEXT PRIMARY KEY,
    version         BIGINT NOT NULL CHECK (version >= 1),
    state           BYTEA NOT NULL,
    message_count   BIGINT NOT NULL CHECK (message_count >= 0),
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL
);

CREATE INDEX conversations_by_update ON conversations (updated_at_ms);

CREATE TABLE messages (
    conversation_id   TEXT NOT NULL REFERENCES conversations (conversation_id),
    seq               BIGINT NOT NULL CHECK (seq >= 0),
    appended_version  BIGINT NOT NULL,
    body              BYTEA NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);

CREATE TABLE message_rewinds (
    conversation_id  TEXT NOT NULL REFERENCES conversations (conversation_id),
    version          BIGINT NOT NULL,
    keep             BIGINT NOT NULL CHECK (keep >= 0),
    previous_count   BIGINT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, version)
);

CREATE FUNCTION messages_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'messages are append-only: no update' USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER messages_no_update BEFORE UPDATE ON messages
FOR EACH ROW EXECUTE FUNCTION messages_refuse_update();

CREATE FUNCTION messages_refuse_gap() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.seq > 0 AND NOT EXISTS (
        SELECT 1 FROM messages WHERE conversation_id = NEW.conversation_id AND seq = NEW.seq - 1
    ) THEN
        RAISE EXCEPTION 'messages are append-only: gap in seq' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER messages_no_gap BEFORE INSERT ON messages
FOR EACH ROW EXECUTE FUNCTION messages_refuse_gap();

CREATE FUNCTION messages_delete_only_by_rewind() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM message_rewinds AS r
        JOIN conversations AS c ON c.conversation_id = r.conversation_id AND c.version = r.version
        WHERE r.conversation_id = OLD.conversation_id AND OLD.seq >= r.keep
    ) THEN
        RAISE EXCEPTION 'messages are append-only: delete only through a rewind' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER messages_delete_only_by_rewind BEFORE DELETE ON messages
FOR EACH ROW EXECUTE FUNCTION messages_delete_only_by_rewind();

CREATE TABLE input_commits (
    conversation_id    TEXT NOT NULL REFERENCES conversations (conversation_id),
    input_id           TEXT NOT NULL,
    committed_version  BIGINT NOT NULL,
    result             BYTEA NOT NULL,
    created_at_ms      BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, input_id)
);

CREATE TABLE llm_calls (
    call_id             TEXT PRIMARY KEY,
    conversation_id     TEXT NOT NULL REFERENCES conversations (conversation_id),
    turn_id             TEXT NOT NULL,
    request             BYTEA NOT NULL,
    request_hash        TEXT NOT NULL,
    messages_hash       TEXT NOT NULL,
    status              TEXT NOT NULL
        CHECK (status IN ('planned', 'streaming', 'committed', 'failed', 'canceled')),
    assistant_hash      TEXT,
    provider            TEXT,
    model               TEXT,
    api                 TEXT,
    input_tokens        BIGINT,
    output_tokens       BIGINT,
    cache_read_tokens   BIGINT,
    cache_write_tokens  BIGINT,
    reasoning_tokens    BIGINT,
    ttft_ms             BIGINT,
    duration_ms         BIGINT,
    cost_usd            DOUBLE PRECISION,
    error               TEXT,
    created_at_ms       BIGINT NOT NULL,
    finished_at_ms      BIGINT
);

CREATE INDEX llm_calls_by_time ON llm_calls (created_at_ms);
CREATE INDEX llm_calls_by_conversation ON llm_calls (conversation_id, created_at_ms);

CREATE TABLE client_operations (
    operation_id     TEXT PRIMARY KEY,
    conversation_id  TEXT NOT NULL REFERENCES conversations (conversation_id),
    turn_id          TEXT NOT NULL,
    tool_call_id     TEXT NOT NULL,
    tool_index       BIGINT NOT NULL,
    tool_name        TEXT NOT NULL,
    side_effects     BIGINT NOT NULL CHECK (side_effects IN (0, 1)),
    request          BYTEA NOT NULL,
    result           BYTEA,
    status           TEXT NOT NULL
        CHECK (status IN ('planned', 'sent', 'completed', 'canceled', 'unknown')),
    created_at_ms    BIGINT NOT NULL,
    updated_at_ms    BIGINT NOT NULL,
    CHECK (status <> 'completed' OR result IS NOT NULL)
);

CREATE INDEX client_operations_by_conversation ON client_operations (conversation_id);

CREATE TABLE stream_diagnostics (
    call_id      TEXT NOT NULL REFERENCES llm_calls (call_id),
    event_index  BIGINT NOT NULL CHECK (event_index >= 0),
    event        BYTEA NOT NULL,
    PRIMARY KEY (call_id, event_index)
);
