-- 0006: each model call's context-meter breakdown (loop/meter.py), as the runtime encodes it.
--
-- JSON: the request's tokens per category (system prompt, tools, rules, skills, MCP, subagents,
-- summarized conversation, conversation) with their characters, of the model's window;
-- estimated when the call is planned, scaled to the provider's usage once it finished. Opaque
-- to the store. Calls recorded before this migration have none.
ALTER TABLE llm_calls ADD COLUMN prompt_breakdown BLOB;
