-- 0003 for PostgreSQL: every DELETE on messages is refused (see 0003_messages_never_deleted.sql);
-- PostgreSQL has no INSERT OR REPLACE, so the primary key alone refuses a replacement.
DROP TRIGGER messages_delete_only_by_rewind ON messages;
DROP FUNCTION messages_delete_only_by_rewind();

CREATE FUNCTION messages_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'messages are append-only: never deleted (a rewind is a view in the state)' USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER messages_never_deleted BEFORE DELETE ON messages
FOR EACH ROW EXECUTE FUNCTION messages_refuse_delete();

-- TRUNCATE skips row triggers: refuse it too.
CREATE TRIGGER messages_never_truncated BEFORE TRUNCATE ON messages
FOR EACH STATEMENT EXECUTE FUNCTION messages_refuse_delete();

ALTER TABLE turn_marks ADD COLUMN view BYTEA;
