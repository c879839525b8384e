"""The SQL of signing in with a person's token (migration 0010): server secrets, sign-ins and
the hashes of the access and refresh tokens handed out.

Plain SQL both backends run (only the `?` placeholders differ). A session token is live while
it has not expired and its person token is not revoked: the join below is the only place that
says so, so a revoked person token takes its access and refresh tokens with it.
"""

from __future__ import annotations

from typing import Any

from ..api import SaveResult, SessionTokenRecord, SignInRecord
from .conn import Conn

_LIVE = (
    "SELECT s.token_hash, s.kind, s.token_id, s.created_at_ms, s.expires_at_ms "
    "FROM session_tokens s JOIN access_tokens a ON a.token_id = s.token_id "
    "WHERE a.revoked_at_ms IS NULL AND (s.expires_at_ms IS NULL OR s.expires_at_ms > ?)"
)


def _session(row: Any) -> SessionTokenRecord:
    return SessionTokenRecord(
        token_hash=str(row[0]),
        kind="refresh" if row[1] == "refresh" else "access",
        token_id=str(row[2]),
        created_at_ms=int(row[3]),
        expires_at_ms=None if row[4] is None else int(row[4]),
    )


def server_secret(conn: Conn, name: str, candidate: str, at_ms: int) -> str:
    conn.execute(
        "INSERT INTO server_secrets (name, value, created_at_ms) VALUES (?, ?, ?) "
        "ON CONFLICT (name) DO NOTHING",
        (name, candidate, at_ms),
    )
    row = conn.execute("SELECT value FROM server_secrets WHERE name = ?", (name,)).fetchone()
    return str(row[0])


def record_sign_in(conn: Conn, record: SignInRecord) -> SaveResult:
    cur = conn.execute(
        "INSERT INTO sign_ins (login_id, challenge, token_id, signed_in_at_ms, claimed_at_ms) "
        "VALUES (?, ?, ?, ?, NULL) ON CONFLICT (login_id) DO NOTHING",
        (record.login_id, record.challenge, record.token_id, record.signed_in_at_ms),
    )
    if cur.rowcount != 1:
        return SaveResult(outcome="ignored", reason="this login id was used already")
    return SaveResult(outcome="inserted")


def claim_sign_in(
    conn: Conn, login_id: str, challenge: str, at_ms: int, not_before_ms: int
) -> SignInRecord | None:
    cur = conn.execute(
        "UPDATE sign_ins SET claimed_at_ms = ? WHERE login_id = ? AND challenge = ? "
        "AND claimed_at_ms IS NULL AND signed_in_at_ms >= ?",
        (at_ms, login_id, challenge, not_before_ms),
    )
    if cur.rowcount != 1:
        return None
    row = conn.execute(
        "SELECT login_id, challenge, token_id, signed_in_at_ms, claimed_at_ms FROM sign_ins "
        "WHERE login_id = ?",
        (login_id,),
    ).fetchone()
    return SignInRecord(
        login_id=str(row[0]),
        challenge=str(row[1]),
        token_id=str(row[2]),
        signed_in_at_ms=int(row[3]),
        claimed_at_ms=int(row[4]),
    )


def add_session_token(conn: Conn, record: SessionTokenRecord) -> SaveResult:
    cur = conn.execute(
        "INSERT INTO session_tokens (token_hash, kind, token_id, created_at_ms, expires_at_ms) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (token_hash) DO NOTHING",
        (
            record.token_hash,
            record.kind,
            record.token_id,
            record.created_at_ms,
            record.expires_at_ms,
        ),
    )
    if cur.rowcount != 1:
        return SaveResult(outcome="ignored", reason="this token was stored already")
    return SaveResult(outcome="inserted")


def find_session_token(conn: Conn, token_hash: str, now_ms: int) -> SessionTokenRecord | None:
    row = conn.execute(f"{_LIVE} AND s.token_hash = ?", (now_ms, token_hash)).fetchone()
    return None if row is None else _session(row)


def list_session_tokens(conn: Conn, now_ms: int) -> tuple[SessionTokenRecord, ...]:
    rows = conn.execute(f"{_LIVE} AND s.kind = 'access'", (now_ms,)).fetchall()
    return tuple(_session(r) for r in rows)


__all__ = [
    "add_session_token",
    "claim_sign_in",
    "find_session_token",
    "list_session_tokens",
    "record_sign_in",
    "server_secret",
]
