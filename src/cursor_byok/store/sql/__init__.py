"""The portable SQL both backends run: one copy of the compare-and-set, dedupe and record rules.

    conn.py      `Conn`, the connection the SQL runs on (SQLite's as it is, psycopg's through
                 postgres/conn.py, which rewrites the `?` placeholders and adapts the values)
    jobs.py      the SQL of each write job (commit, upserts, runs, turn marks, diagnostics)
    rows.py      the SQL of each read and the decoders from rows to records
    activity.py  run outcomes and the per-conversation overview (what an operator looks at)
    tokens.py    the tokens per person and the usage made under each
    links.py     the subagent links: parent Task call -> child conversation
    leases.py    the process leases and the "planned" calls they own (a dead owner's taken)

Written portable: `?` placeholders, named subqueries, sums of `CASE` rather than of booleans,
no pragma and no backend function. Each function takes the connection it runs on and decides
nothing; the backend owns connections, transactions and threads.
"""

from .conn import Conn, Cursor

__all__ = ["Conn", "Cursor"]
