-- 0014 (renumber freely, the loader wants 1..n): run_appends is a delivery buffer, not
-- history (docs/store.md): bounded per request id and per client, its rows deleted once
-- their run ended. `client` is whose allowance the append counted against (a person's token,
-- else an address: transport/connect/clients.py); `bytes` the payload's length, summed for
-- the bounds without reading the payloads. SQLite keeps the table empty, as before.
ALTER TABLE run_appends ADD COLUMN client TEXT NOT NULL DEFAULT '';
ALTER TABLE run_appends ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX run_appends_by_client ON run_appends (client);
