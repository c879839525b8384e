-- 0015 (renumber freely at merge: the loader wants 1..n): who a conversation belongs to, and
-- the budget a model call holds while it is in flight.
--
-- `owner_id`: the person (AccessTokenRecord.person: the first token of a chain of
-- rotations) whose token started the conversation; NULL: the operator's (its own
-- `auth_token`, a server open without tokens, or a conversation stored before 0015). The
-- store keeps it; who may see a conversation is the runtime's to say.
ALTER TABLE conversations ADD COLUMN owner_id TEXT;
CREATE INDEX conversations_owner ON conversations (owner_id, updated_at_ms);
-- `reserved_usd`: the upper bound of a call's cost reserved against its token's monthly
-- budget when it was planned. While the call is "planned" or "streaming" it counts toward
-- the budget in place of its cost; once it has a final status its `cost_usd` counts.
ALTER TABLE llm_calls ADD COLUMN reserved_usd REAL;
