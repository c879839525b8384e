-- 0006 for PostgreSQL: 0006_call_prompt_breakdown.sql with BYTEA for BLOB.
ALTER TABLE llm_calls ADD COLUMN prompt_breakdown BYTEA;
