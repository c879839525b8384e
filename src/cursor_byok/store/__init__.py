"""Persistence of conversation state, call records and dedupe keys. It stores; it never decides."""

from .api import (
    CallStatus,
    ClientOperationRecord,
    CommitResult,
    CommitStatus,
    ConversationRecord,
    ConversationSummary,
    FirstLook,
    InputCommit,
    LLMCallRecord,
    OperationStatus,
    SaveOutcome,
    SaveResult,
    Store,
)
from .backends import AnyStore, is_postgres_url, open_store
from .errors import (
    RecordMismatchError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreIntegrityError,
    StoreIOError,
    StoreLockedError,
    StoreSchemaError,
)
from .postgres import PostgresStore
from .sqlite import SQLiteStore, WriterStats

__all__ = [
    "AnyStore",
    "CallStatus",
    "ClientOperationRecord",
    "CommitResult",
    "CommitStatus",
    "ConversationRecord",
    "ConversationSummary",
    "FirstLook",
    "InputCommit",
    "LLMCallRecord",
    "OperationStatus",
    "PostgresStore",
    "RecordMismatchError",
    "SQLiteStore",
    "SaveOutcome",
    "SaveResult",
    "Store",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "StoreIntegrityError",
    "StoreLockedError",
    "StoreSchemaError",
    "WriterStats",
    "is_postgres_url",
    "open_store",
]
