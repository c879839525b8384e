"""The edges of a person token's limits (runtime/access.py): a budget spent exactly is spent,
and a models limit naming nothing this server serves allows nothing (it never falls back to
the default model the way a run's unknown model name does)."""

from __future__ import annotations

from pathlib import Path

from cursor_byok.llm.faux import FauxLLM
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime import RunnerServices, new_runner
from tests.runtime.test_token_limits import CAP, OTHER, PRICED, Clock, add_token, costing, turn


async def test_a_budget_spent_to_the_cent_refuses_the_next_call(tmp_path: Path) -> None:
    clock = Clock("2026-03-10T12:00:00")
    store = await SQLiteStore.open(tmp_path / "db")
    llm = FauxLLM([costing(CAP), costing(0, "never")], chunk_size=50)
    runner = new_runner(
        RunnerServices(
            models={PRICED.id: PRICED}, store=store, llm_for=lambda _m: llm, now_ms=clock
        )
    )
    await add_token(store, budget_usd=float(CAP))
    _, end = await turn(runner, "r1", "c1")  # $4 reserved of $4, and it costs all of it
    assert end is None
    client, end = await turn(runner, "r2", "c2")
    assert end is not None and end.code == "resource_exhausted"
    assert end.message == (
        "token 'alice' has spent its monthly budget: $4.00 of $4.00 in 2026-03 (UTC); "
        "it renews on 2026-04-01"
    )
    assert client.text() == ""
    await store.close()


async def test_a_models_limit_of_unserved_names_never_falls_back_to_the_default(
    tmp_path: Path,
) -> None:
    clock = Clock("2026-03-10T12:00:00")
    store = await SQLiteStore.open(tmp_path / "db")
    llm = FauxLLM([costing(0, "never")], chunk_size=50)
    services = RunnerServices(
        models={PRICED.id: PRICED, OTHER.id: OTHER},
        store=store,
        llm_for=lambda _m: llm,
        now_ms=clock,
        default_model=PRICED.id,  # an unknown run model name is served by it
    )
    runner = new_runner(services)
    await add_token(store, models=("gpt-9",))
    client, end = await turn(runner, "r1", "c1", model_id=PRICED.id)
    assert end is not None and end.code == "permission_denied"
    assert end.message == "token 'alice' may not use model 'faux' (its models limit: gpt-9)"
    assert client.kinds() == [] and llm.calls == []
    await store.close()
