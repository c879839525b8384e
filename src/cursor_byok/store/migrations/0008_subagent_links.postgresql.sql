-- 0008 for PostgreSQL: 0008_subagent_links.sql with PostgreSQL's types (no STRICT; times in
-- milliseconds need BIGINT).
CREATE TABLE subagent_links (
    parent_conversation_id  TEXT NOT NULL,
    parent_tool_call_id     TEXT NOT NULL,
    child_conversation_id   TEXT NOT NULL,
    subagent_type           TEXT NOT NULL DEFAULT '',
    depth                   INTEGER NOT NULL DEFAULT 1,
    created_at_ms           BIGINT NOT NULL,
    PRIMARY KEY (parent_conversation_id, parent_tool_call_id)
);

CREATE INDEX subagent_links_by_child ON subagent_links (child_conversation_id);
