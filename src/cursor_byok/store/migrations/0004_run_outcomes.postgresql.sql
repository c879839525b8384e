-- 0004 for PostgreSQL (types only differ from 0004_run_outcomes.sql): how each run ended, for the dashboard (its error, its title, what it cost).
--
-- Written once per run by observability when the run is over; a run reopened after a restart
-- (same request_id) replaces its row. A run refused before it had a conversation (an unknown
-- model) still has its row, so no foreign key to conversations. Nothing else reads it: the
-- runtime never decides anything from these rows.
CREATE TABLE run_outcomes (
    request_id          TEXT PRIMARY KEY,
    conversation_id     TEXT NOT NULL,
    outcome             TEXT NOT NULL,
    finished_at_ms      BIGINT NOT NULL,
    duration_ms         BIGINT NOT NULL DEFAULT 0,
    title               TEXT NOT NULL DEFAULT '',
    model               TEXT NOT NULL DEFAULT '',
    provider            TEXT NOT NULL DEFAULT '',
    error               TEXT,
    llm_calls           BIGINT NOT NULL DEFAULT 0,
    input_tokens        BIGINT NOT NULL DEFAULT 0,
    output_tokens       BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens   BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens  BIGINT NOT NULL DEFAULT 0,
    cost_usd            DOUBLE PRECISION NOT NULL DEFAULT 0
);

CREATE INDEX run_outcomes_by_time ON run_outcomes (finished_at_ms);
CREATE INDEX run_outcomes_by_conversation ON run_outcomes (conversation_id, finished_at_ms);
