"""Where the tests find what they read: everything lives inside the repository.

A fresh clone alone in an empty folder runs the whole suite, so no test reads anything beside
the repository (`tests/app/test_self_contained.py` checks it).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
CURSOR_FIXTURES = FIXTURES / "cursor"  # real IDE run_request captures, with their INDEX.md
PROVIDER_FIXTURES = FIXTURES / "providers"  # recorded provider SSE bodies, with their INDEX.md
REALCLIENT = REPO / "tests" / "realclient"  # the third-party client's driver and setup script
