-- 0008: which conversation is the helper (Task child) of which parent call.
--
-- One row per parent Task call, written when this server recognises the child's run. After
-- a restart the parent's Task result, whose answer from the IDE was lost with its stream, is
-- built from the child conversation found here (docs/subagents.md, "Durability"). The child
-- is a conversation of its own; no foreign keys, so either side may be written first.
CREATE TABLE subagent_links (
    parent_conversation_id  TEXT NOT NULL,
    parent_tool_call_id     TEXT NOT NULL,
    child_conversation_id   TEXT NOT NULL,
    subagent_type           TEXT NOT NULL DEFAULT '',
    depth                   INTEGER NOT NULL DEFAULT 1,
    created_at_ms           INTEGER NOT NULL,
    PRIMARY KEY (parent_conversation_id, parent_tool_call_id)
) STRICT;

CREATE INDEX subagent_links_by_child ON subagent_links (child_conversation_id);
