-- 0015 for PostgreSQL: 0015_owners_and_reservations.sql with PostgreSQL's types (a cost in
-- dollars needs DOUBLE PRECISION: REAL is 4 bytes there).
ALTER TABLE conversations ADD COLUMN owner_id TEXT;
CREATE INDEX conversations_owner ON conversations (owner_id, updated_at_ms);
ALTER TABLE llm_calls ADD COLUMN reserved_usd DOUBLE PRECISION;
