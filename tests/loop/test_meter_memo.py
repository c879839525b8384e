"""`measure` keeps the last request it estimated and the last meter it made, by the identity of
the request's characters: whatever the order of the calls, a kept result is what measuring
again gives, and a request measured twice the same way is measured once."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import Usage
from cursor_byok.loop import meter
from cursor_byok.loop.categories import PromptChars
from tests.runtime.harness import Client, open_server, run_request

_CHARS = st.builds(
    PromptChars,
    system_prompt=st.integers(0, 50_000),
    tools=st.integers(0, 50_000),
    conversation=st.integers(0, 200_000),
    images=st.integers(0, 3),
)


def _fresh(chars: PromptChars, used: int, window: int) -> meter.Meter:
    return meter._measured(chars, meter._estimates(chars), used, window)


@given(
    st.lists(_CHARS, min_size=1, max_size=3),
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from([0, 0, 1, 999, 120_000]), st.integers(1, 3)),
        min_size=1,
        max_size=12,
    ),
)
def test_a_kept_meter_is_what_measuring_again_gives(
    requests: list[PromptChars], calls: list[tuple[int, int, int]]
) -> None:
    # Each request twice: the object itself and an equal copy (another identity).
    pool = [c for r in requests for c in (r, msgspec.structs.replace(r))]
    for index, used, window in calls:
        chars = pool[index % len(pool)]
        got = meter.measure(chars, used=used, window=window * 100_000)
        assert got == _fresh(chars, used, window * 100_000), (chars, used, window)


def test_the_same_measure_twice_is_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    real = meter._measured
    monkeypatch.setattr(meter, "_measured", lambda *a: made.append(a[2]) or real(*a))
    chars = PromptChars(system_prompt=4_001, conversation=123)
    planned = meter.measure(chars, used=0, window=1000)
    first = meter.measure(chars, used=900, window=1000)
    assert meter.measure(chars, used=900, window=1000) is first
    other_window = meter.measure(chars, used=900, window=2000)
    copy = meter.measure(msgspec.structs.replace(chars), used=900, window=2000)
    assert made == [0, 900, 900, 900]
    assert planned == _fresh(chars, 0, 1000) and first == _fresh(chars, 900, 1000)
    assert other_window == copy == _fresh(chars, 900, 2000)


async def test_a_turn_measures_its_call_once_planned_and_once_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call's estimate at its plan, its meter at its answer; the checkpoint after the
    answer shows that same meter without measuring (and the estimate is made once)."""
    made: list[int] = []
    estimated: list[PromptChars] = []
    real_measured, real_estimates = meter._measured, meter._estimates
    monkeypatch.setattr(meter, "_measured", lambda *a: made.append(a[2]) or real_measured(*a))
    monkeypatch.setattr(meter, "_estimates", lambda c: estimated.append(c) or real_estimates(c))
    answer = FauxResponse.text("Hello there", usage=Usage(input=1000, output=20))
    server = await open_server(tmp_path / "db", [answer])
    client = Client("r1")
    client.say(run_request("c1", "hi"))
    server.start(client)
    assert await client.ended() is None
    assert made == [0, 1000]
    assert len(estimated) == 1
