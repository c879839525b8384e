-- 0010: signing in with a person's token (docs/clients.md, "Signing in with your token").
--
-- `server_secrets`: values the server makes once and keeps (the key that signs access tokens,
-- the repository path key GetServerConfig hands the CLI). `sign_ins`: a person pasted their
-- token on the sign-in page for the client's login id; the client's poll claims it once.
-- `session_tokens`: the SHA-256 (hex) of each access and refresh token handed out, never a
-- token itself, bound to the person token it was signed in with (it dies with it). Plain SQL
-- that PostgreSQL runs as it is.
CREATE TABLE server_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE TABLE sign_ins (
    login_id TEXT PRIMARY KEY,
    challenge TEXT NOT NULL,
    token_id TEXT NOT NULL,
    signed_in_at_ms BIGINT NOT NULL,
    claimed_at_ms BIGINT
);
CREATE TABLE session_tokens (
    token_hash TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
    token_id TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT
);
CREATE INDEX session_tokens_by_token ON session_tokens (token_id, kind);
