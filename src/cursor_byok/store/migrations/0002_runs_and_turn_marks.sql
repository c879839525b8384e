-- 0002: what a run needs to resume and what a rewind needs to find its turn.

-- The run request of every run, by request_id: a client reconnecting with the same request_id
-- after a restart does not re-send its appends, so the server must find the request here.
CREATE TABLE runs (
    request_id      TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    request         BLOB NOT NULL,
    created_at_ms   INTEGER NOT NULL
) STRICT;

CREATE INDEX runs_by_conversation ON runs (conversation_id);

-- One row per completed turn whose checkpoint was published to the client: the blob id the
-- checkpoint lists for that turn and the message count at its end. A later run whose
-- checkpoint lists only a prefix of these turns was rewound by the user to that turn.
CREATE TABLE turn_marks (
    conversation_id TEXT NOT NULL,
    turn            INTEGER NOT NULL CHECK (turn >= 1),
    blob_id         BLOB NOT NULL,
    message_count   INTEGER NOT NULL CHECK (message_count >= 0),
    created_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, turn)
) STRICT;
