"""SQLite backend of the Store: stdlib sqlite3, WAL, one writer thread with group commit.

Everything specific to SQLite (pragmas, the writer thread, the reader pool) lives in this
package; the Store protocol (store/api.py) is all another backend implements.

    store.py   SQLiteStore, the facade: checks arguments, builds each job or read, hands it over
    writer.py  the writer thread: queue, group commit, a savepoint per job, synchronous FULL or
               NORMAL per batch, whole-batch failure on storage errors
    reads.py   point reads on the caller's thread, the rest on a pool of reader threads
    errors.py  sqlite3 errors mapped to StoreError classes; why a path cannot be opened
    integrity.py  the quick integrity check before serving, bounded in time
    binding.py identity adapters: None and bytes bound without sqlite3's adapter search

The SQL of every job and read is the portable SQL both backends run (store/sql/).

Writes run in order, one batch (one transaction) at a time; a caller's future is resolved
only after its batch's COMMIT returned. Reads never wait for the writer (WAL snapshots).
Across processes, SQLite's write lock and the version compare-and-swap decide.
"""

from .integrity import QuickCheck, QuickCheckOutcome, quick_check
from .reads import INLINE_MESSAGES
from .store import SQLiteStore
from .writer import Synchronous, WriterStats

__all__ = [
    "INLINE_MESSAGES",
    "QuickCheck",
    "QuickCheckOutcome",
    "SQLiteStore",
    "Synchronous",
    "WriterStats",
    "quick_check",
]
