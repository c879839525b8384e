"""What a client is told of each storage error: a code it can act on, never the server's path
or SQLite's words; the log keeps them (issue 13, point 8)."""

from __future__ import annotations

import logging

import pytest

from cursor_byok.store.errors import (
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
)
from cursor_byok.transport.runtime.ending import ending_of

PATH = "/srv/secret-place/byok.db"


@pytest.mark.parametrize(
    ("error", "code", "words"),
    [
        (StoreFullError(PATH, "database or disk is full (SQLITE_FULL)"), "unavailable", "full"),
        (StoreLockedError(PATH, "database is locked (SQLITE_BUSY)"), "unavailable", "busy"),
        (StoreCorruptError(PATH, "malformed (SQLITE_CORRUPT)"), "internal", "could not read"),
        (StoreIOError(PATH, "disk I/O error (SQLITE_IOERR)"), "internal", "could not read"),
        (StoreError(PATH, "database error (SQLITE_ERROR)"), "internal", "could not read"),
    ],
)
def test_storage_errors_reach_the_client_without_server_details(
    error: StoreError, code: str, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    ending, outcome = ending_of(error, "req-1")
    assert (ending.code, outcome) == (code, "error")
    assert words in ending.message
    for text in (ending.message, ending.details.decode("utf-8", "replace")):
        assert "secret-place" not in text and "SQLITE" not in text, text
    assert any("req-1" in r.getMessage() and PATH in r.getMessage() for r in caplog.records)
