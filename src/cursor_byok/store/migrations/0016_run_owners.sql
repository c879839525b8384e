-- 0016 (renumber freely at merge: the loader wants 1..n): whose a shim run and its relayed
-- appends are, so that a replica that does not hold a run can refuse another person's
-- append to it (transport/connect/relay.py) in the transaction that would store it.
--
-- `runs.owner_id`: the person (AccessTokenRecord.person) whose token the run is made under;
-- NULL: the operator's (its own `auth_token`, an open server, or a run stored before 0016).
ALTER TABLE runs ADD COLUMN owner_id TEXT;
-- `run_appends.person`: the person whose token sent the append; NULL: the operator.
ALTER TABLE run_appends ADD COLUMN person TEXT;
