"""The SQL of what an operator looks at: run outcomes (migration 0004) and the per-conversation
overview the dashboard lists, and the prices calls were made at (0013). Kept apart from
rows.py and jobs.py, which serve the runtime.

Every function takes the connection it runs on (a reader's, or the writer's inside a job) and
decides nothing: the sums and "latest" picks are plain SQL over what is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..api import ConversationOverview, LLMCallRecord, RunOutcomeRecord, SaveResult
from ..price_spans import PriceSpan
from .conn import Conn
from .rows import CALL_FIELDS, CALL_SELECT

OUTCOME_FIELDS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(RunOutcomeRecord))
_OUTCOME_SELECT = f"SELECT {', '.join(OUTCOME_FIELDS)} FROM run_outcomes"
_OUTCOME_UPSERT = (
    f"INSERT INTO run_outcomes ({', '.join(OUTCOME_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in OUTCOME_FIELDS)}) "
    "ON CONFLICT (request_id) DO UPDATE SET "
    + ", ".join(
        "title = COALESCE(NULLIF(excluded.title, ''), run_outcomes.title)"
        if f == "title"
        else f"{f} = excluded.{f}"
        for f in OUTCOME_FIELDS
        if f != "request_id"
    )
)
# The SQL here is portable between SQLite and PostgreSQL (subqueries named, sums of CASE
# rather than of booleans): both backends run it (store/sql/).
# Newest activity first: a conversation's last commit, or its last run outcome (a conversation
# whose runs were all refused has no conversations row).
_RECENT_CONVERSATIONS = """
SELECT conversation_id, MAX(t) AS last FROM (
    SELECT conversation_id, updated_at_ms AS t FROM conversations
    UNION ALL
    SELECT conversation_id, MAX(finished_at_ms) AS t FROM run_outcomes GROUP BY conversation_id
) AS activity GROUP BY conversation_id ORDER BY last DESC, conversation_id LIMIT ?
"""
# The same, of one owner's conversations only (the index conversations_owner): a person's
# dashboard, whatever the others did since.
_OWNED_CONVERSATIONS = """
SELECT conversation_id, MAX(t) AS last FROM (
    SELECT conversation_id, updated_at_ms AS t FROM conversations WHERE owner_id = ?
    UNION ALL
    SELECT o.conversation_id, MAX(o.finished_at_ms) AS t FROM run_outcomes o
    JOIN conversations c ON c.conversation_id = o.conversation_id
    WHERE c.owner_id = ? GROUP BY o.conversation_id
) AS activity GROUP BY conversation_id ORDER BY last DESC, conversation_id LIMIT ?
"""
_OWNED = "conversation_id IN (SELECT conversation_id FROM conversations WHERE owner_id = ?)"
# The calls made under any token of a person (its chain of rotations).
_PERSONS_TOKENS = (
    "token_id IN (SELECT token_id FROM access_tokens "
    "WHERE COALESCE(NULLIF(person_id, ''), token_id) = ?)"
)
_FINAL = "('committed', 'failed', 'canceled')"
_CALL_SUMS = f"""
SELECT COUNT(*), COUNT(DISTINCT turn_id), SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END),
       COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
       COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0),
       COALESCE(SUM(reasoning_tokens), 0), COALESCE(SUM(cost_usd), 0.0),
       SUM(CASE WHEN status IN {_FINAL} AND cost_usd IS NULL THEN 1 ELSE 0 END)
FROM llm_calls WHERE conversation_id = ?
"""


def save_outcome(conn: Conn, record: RunOutcomeRecord) -> SaveResult:
    known = conn.execute(
        "SELECT 1 FROM run_outcomes WHERE request_id = ?", (record.request_id,)
    ).fetchone()
    write_outcome(conn, record)
    return SaveResult(outcome="inserted" if known is None else "updated")


def write_outcome(conn: Conn, record: RunOutcomeRecord) -> None:
    """The upsert of save_outcome alone, without the look that tells an insert from an
    update: for the outcome that rides along with a commit, where nobody asks which."""
    conn.execute(_OUTCOME_UPSERT, tuple(getattr(record, f) for f in OUTCOME_FIELDS))


def recent_outcomes(
    conn: Conn, limit: int, owner: str | None = None
) -> tuple[RunOutcomeRecord, ...]:
    """Newest first; `owner`: of that person's conversations only."""
    where, args = (f" WHERE {_OWNED}", (owner,)) if owner is not None else ("", ())
    rows = conn.execute(
        f"{_OUTCOME_SELECT}{where} ORDER BY finished_at_ms DESC, request_id LIMIT ?",
        (*args, limit),
    ).fetchall()
    return tuple(_outcome_from_row(r) for r in rows)


def recent_calls(conn: Conn, limit: int, person: str | None = None) -> tuple[LLMCallRecord, ...]:
    """Newest first; `person`: the calls made under that person's tokens only."""
    where, args = (f" WHERE {_PERSONS_TOKENS}", (person,)) if person is not None else ("", ())
    rows = conn.execute(
        f"{CALL_SELECT}{where} ORDER BY created_at_ms DESC, call_id LIMIT ?", (*args, limit)
    ).fetchall()
    return tuple(LLMCallRecord(**dict(zip(CALL_FIELDS, r, strict=True))) for r in rows)


def conversation_outcomes(
    conn: Conn, conversation_id: str, limit: int
) -> tuple[RunOutcomeRecord, ...]:
    rows = conn.execute(
        f"{_OUTCOME_SELECT} WHERE conversation_id = ? "
        "ORDER BY finished_at_ms DESC, request_id LIMIT ?",
        (conversation_id, limit),
    ).fetchall()
    return tuple(_outcome_from_row(r) for r in rows)


def conversation_calls(conn: Conn, conversation_id: str, limit: int) -> tuple[LLMCallRecord, ...]:
    rows = conn.execute(
        f"{CALL_SELECT} WHERE conversation_id = ? ORDER BY created_at_ms DESC, call_id LIMIT ?",
        (conversation_id, limit),
    ).fetchall()
    return tuple(LLMCallRecord(**dict(zip(CALL_FIELDS, r, strict=True))) for r in rows)


def overviews(conn: Conn, limit: int, owner: str | None = None) -> tuple[ConversationOverview, ...]:
    """Run inside one read transaction: every sum comes from the same snapshot. `owner`: that
    person's conversations only."""
    if owner is None:
        recent = conn.execute(_RECENT_CONVERSATIONS, (limit,)).fetchall()
    else:
        recent = conn.execute(_OWNED_CONVERSATIONS, (owner, owner, limit)).fetchall()
    return tuple(_overview(conn, cid, last) for cid, last in recent)


def overview(conn: Conn, conversation_id: str) -> ConversationOverview | None:
    row = conn.execute(
        "SELECT MAX(t) FROM ("
        "SELECT updated_at_ms AS t FROM conversations WHERE conversation_id = ? "
        "UNION ALL SELECT finished_at_ms FROM run_outcomes WHERE conversation_id = ?) AS activity",
        (conversation_id, conversation_id),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return _overview(conn, conversation_id, int(row[0]))


def _overview(conn: Conn, cid: str, last: int) -> ConversationOverview:
    head = conn.execute(
        "SELECT version, message_count, created_at_ms, owner_id FROM conversations "
        "WHERE conversation_id = ?",
        (cid,),
    ).fetchone()
    (calls, turns, failed_calls, inp, out, read, write, reasoning, cost, unpriced) = conn.execute(
        _CALL_SUMS, (cid,)
    ).fetchone()
    runs, failed_runs = conn.execute(
        "SELECT COUNT(*), COUNT(error) FROM run_outcomes WHERE conversation_id = ?", (cid,)
    ).fetchone()
    title = conn.execute(
        "SELECT title FROM run_outcomes WHERE conversation_id = ? AND title <> '' "
        "ORDER BY finished_at_ms, request_id LIMIT 1",
        (cid,),
    ).fetchone()
    latest_run = conn.execute(
        "SELECT model, provider FROM run_outcomes WHERE conversation_id = ? "
        "ORDER BY finished_at_ms DESC, request_id LIMIT 1",
        (cid,),
    ).fetchone()
    latest_call = conn.execute(
        "SELECT provider FROM llm_calls WHERE conversation_id = ? "
        "ORDER BY created_at_ms DESC, call_id LIMIT 1",
        (cid,),
    ).fetchone()
    error = _last_error(conn, cid)
    return ConversationOverview(
        conversation_id=cid,
        last_activity_ms=last,
        created_at_ms=None if head is None else head[2],
        version=0 if head is None else head[0],
        message_count=0 if head is None else head[1],
        owner_id=None if head is None else head[3],
        title="" if title is None else title[0],
        model="" if latest_run is None else latest_run[0],
        provider=(latest_run[1] if latest_run is not None and latest_run[1] else "")
        or (latest_call[0] or "" if latest_call is not None else ""),
        runs=runs,
        failed_runs=failed_runs,
        turns=turns,
        llm_calls=calls,
        failed_calls=failed_calls or 0,
        input_tokens=inp,
        output_tokens=out,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=reasoning,
        cost_usd=float(cost),
        unpriced_calls=unpriced or 0,
        last_error=None if error is None else error[0],
        last_error_at_ms=None if error is None else error[1],
    )


def _last_error(conn: Conn, cid: str) -> tuple[str, int] | None:
    """The latest error of the conversation's failed calls and failed runs."""
    row = conn.execute(
        "SELECT error, t FROM ("
        "SELECT error, COALESCE(finished_at_ms, created_at_ms) AS t FROM llm_calls "
        "WHERE conversation_id = ? AND status = 'failed' AND error IS NOT NULL "
        "UNION ALL SELECT error, finished_at_ms FROM run_outcomes "
        "WHERE conversation_id = ? AND error IS NOT NULL"
        ") AS errors ORDER BY t DESC LIMIT 1",
        (cid, cid),
    ).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def _outcome_from_row(row: Sequence[Any]) -> RunOutcomeRecord:
    return RunOutcomeRecord(**dict(zip(OUTCOME_FIELDS, row, strict=True)))


# Newest set of prices last per model; a set used again later keeps its first time.
_PRICE_SPANS = """
SELECT provider, model, prices, MIN(created_at_ms), MAX(created_at_ms), COUNT(*)
FROM llm_calls WHERE provider IS NOT NULL AND model IS NOT NULL
GROUP BY provider, model, prices ORDER BY provider, model, MIN(created_at_ms) LIMIT ?
"""


def price_spans(conn: Conn, limit: int) -> tuple[PriceSpan, ...]:
    rows = conn.execute(_PRICE_SPANS, (limit,)).fetchall()
    return tuple(
        PriceSpan(provider=r[0], model=r[1], prices=r[2], first_ms=r[3], last_ms=r[4], calls=r[5])
        for r in rows
    )
