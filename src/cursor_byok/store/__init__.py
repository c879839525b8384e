"""Persistence of conversation state, call records and dedupe keys. It stores; it never decides."""

from .api import (
    CallStatus,
    ClientOperationRecord,
    CommitResult,
    CommitStatus,
    ConversationRecord,
    ConversationSummary,
    InputCommit,
    LLMCallRecord,
    OperationStatus,
    SaveOutcome,
    SaveResult,
    Store,
)
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
from .sqlite import SQLiteStore, WriterStats

__all__ = [
    "CallStatus",
    "ClientOperationRecord",
    "CommitResult",
    "CommitStatus",
    "ConversationRecord",
    "ConversationSummary",
    "InputCommit",
    "LLMCallRecord",
    "OperationStatus",
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
]
