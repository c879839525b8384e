-- 0012 (the tokens block; renumber freely, the loader wants 1..n): whether the server lets a
-- request in without a token, kept where every process reads it, and the person a token
-- belongs to across rotations. Plain SQL that PostgreSQL runs as it is.
--
-- `server_settings` holds values an operator sets on purpose (`cursor-byok token open|close`
-- writes `access`); the store keeps them as text and decides nothing about them.
CREATE TABLE server_settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
-- `person_id`: the id of the first token of a chain of rotations (`cursor-byok token rotate`
-- revokes a token and adds its successor with the same person). A person's monthly spend and
-- usage sum the calls of all its tokens; '' (a token never rotated): its own person.
ALTER TABLE access_tokens ADD COLUMN person_id TEXT NOT NULL DEFAULT '';
CREATE INDEX access_tokens_person ON access_tokens (person_id);
