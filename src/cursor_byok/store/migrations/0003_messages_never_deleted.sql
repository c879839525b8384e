-- 0003: messages are never deleted; a turn mark carries the runtime's view of the history.
--
-- A rewind no longer deletes message rows: the runtime keeps the active history as a view in
-- its own state bytes, and the store only appends. The trigger that let a recorded rewind
-- delete rows goes; every DELETE on messages is refused. message_rewinds stays with its rows:
-- they record the rewinds made by earlier versions of cursor-byok.

DROP TRIGGER messages_delete_only_by_rewind;

CREATE TRIGGER messages_never_deleted BEFORE DELETE ON messages
BEGIN
    SELECT RAISE(
        ABORT, 'messages are append-only: never deleted (a rewind is a view in the state)'
    );
END;

-- INSERT OR REPLACE deletes the row it replaces without firing delete triggers (unless
-- recursive_triggers is on), so a message is refused its replacement here.
CREATE TRIGGER messages_never_replaced BEFORE INSERT ON messages
WHEN EXISTS (
    SELECT 1 FROM messages WHERE conversation_id = NEW.conversation_id AND seq = NEW.seq
)
BEGIN
    SELECT RAISE(ABORT, 'messages are append-only: never replaced');
END;

-- The runtime's encoding of the active-history view at the end of the turn, opaque to the
-- store. NULL: none given, or a mark written before this migration.
ALTER TABLE turn_marks ADD COLUMN view BLOB;
