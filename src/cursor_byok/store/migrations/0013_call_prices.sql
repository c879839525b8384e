-- 0013 (renumber freely at merge: the loader wants 1..n): the prices each model call was
-- made at, so that its cost is computed once, from the prices in force then, and never again.
-- Plain SQL that PostgreSQL runs as it is.
--
-- `llm_calls.prices`: USD per million tokens as JSON ({"input": .., "output": ..,
-- "cache_read": .., "cache_write": ..}), written when the call is planned; its `cost_usd` is
-- that times its usage, written once its usage is known. NULL: its model had no prices (the
-- call is unpriced, and stays unpriced whatever prices come later), or it was made before
-- this migration. The dashboard lists when each model's prices changed from these values.
-- `run_outcomes.unpriced_calls`: the run's finished calls stored without a cost, so the runs
-- table says "unpriced" from what was stored, not from today's configuration.
ALTER TABLE llm_calls ADD COLUMN prices TEXT;
ALTER TABLE run_outcomes ADD COLUMN unpriced_calls INTEGER NOT NULL DEFAULT 0;
CREATE INDEX llm_calls_prices ON llm_calls (provider, model, prices, created_at_ms);
