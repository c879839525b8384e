-- 0005: the tool catalogue version each model call was built with (loop/catalogue.py).
--
-- The catalogue decides which tools a request offers, so a new version changes the request's
-- prefix: an operator comparing two calls of one conversation sees why the prompt cache
-- missed. Calls recorded before this migration have none.
ALTER TABLE llm_calls ADD COLUMN catalogue_version INTEGER;
