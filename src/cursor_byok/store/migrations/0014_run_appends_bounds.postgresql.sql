-- 0014 for PostgreSQL: 0014_run_appends_bounds.sql with PostgreSQL's types.
ALTER TABLE run_appends ADD COLUMN client TEXT NOT NULL DEFAULT '';
ALTER TABLE run_appends ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
UPDATE run_appends SET bytes = octet_length(payload);
CREATE INDEX run_appends_by_client ON run_appends (client);
