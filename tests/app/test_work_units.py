"""How scripts/test splits the suite over its xdist workers (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests import conftest


def test_a_modules_tests_are_one_unit_and_the_real_model_tests_are_two_more() -> None:
    unit = conftest._work_unit
    assert unit("tests/e2e/test_tokens.py::test_the_rate_limit") == "tests/e2e/test_tokens.py"
    assert unit("tests/e2e/test_compaction.py::test_x[h2]") == "tests/e2e/test_compaction.py"
    assert unit("tests/loop/test_a.py::TestB::test_c") == "tests/loop/test_a.py"
    assert unit("tests/realupstream/test_windows_real.py::test_w") == conftest.WINDOW_GROUP
    assert unit("tests/realupstream/test_windows_real.py::test_d") == conftest.WINDOW_GROUP
    assert unit("tests/realupstream/test_cancel_real.py::test_c") == conftest.REAL_MODEL_GROUP
    assert unit("tests/realupstream/test_compaction_real.py::t") == conftest.REAL_MODEL_GROUP
    assert conftest.WINDOW_GROUP != conftest.REAL_MODEL_GROUP


def test_xdist_schedules_by_those_units() -> None:
    """The scheduler xdist is handed splits node ids with the same rule (xdist's own
    loadgroup marks do not reach it under pytest 9.2)."""
    scheduler = conftest._WorkUnits.__new__(conftest._WorkUnits)
    for nodeid in ("tests/e2e/test_tokens.py::test_a", "tests/realupstream/test_fork_real.py::t"):
        assert scheduler._split_scope(nodeid) == conftest._work_unit(nodeid)


def test_the_real_model_tests_are_collected_first(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    real = [i for i, item in enumerate(items) if conftest._is_real_model(item.nodeid)]
    if real:  # only when this session collected them
        assert real == list(range(len(real)))


def test_the_two_real_model_units_are_the_first_two_so_two_workers_start_on_them() -> None:
    """xdist's load-scope scheduler hands out units in the order their first test was
    collected, one to each worker first (checked in xdist 3.8's `LoadScopeScheduling`)."""
    collected = [
        "tests/app/test_a.py::t",
        "tests/realupstream/test_adapters_real.py::t",
        "tests/e2e/test_b.py::t",
        "tests/realupstream/test_windows_real.py::t",
        "tests/realupstream/test_session_real.py::t",
    ]
    ordered = sorted(collected, key=lambda nodeid: not conftest._is_real_model(nodeid))
    units = list(dict.fromkeys(conftest._work_unit(nodeid) for nodeid in ordered))
    assert units[:2] == [conftest.REAL_MODEL_GROUP, conftest.WINDOW_GROUP]
