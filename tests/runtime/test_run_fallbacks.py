"""Fallback calls in the production runtime (in-process, FauxLLM per provider, real SQLite):
a fallback goes through its own model's provider, is recorded for that model, and a run
reopened after a restart while the fallback was streaming resends the fallback's own bytes to
the fallback's provider, not to the first model's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from cursor_byok.llm.faux import FauxLLM, FauxResponse
from cursor_byok.llm.models import Model
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime import RunnerServices, new_runner
from tests.runtime.harness import MODEL, Client, Server, run_request

PRIMARY = msgspec.structs.replace(MODEL, fallbacks=("backup",))
BACKUP = Model(
    id="backup",
    display_name="Backup",
    provider=ProviderSettings(name="spare", api="faux", base_url="http://spare.invalid"),
    settings=ModelSettings(model="spare-model"),
    context_window=50_000,
    prices=None,
)
DOWN = FauxResponse.error("faux: HTTP 503", started=False)


async def two_providers(
    db: Path, primary: list[FauxResponse], backup: list[FauxResponse], *, delay: float = 0.0
) -> tuple[Server, FauxLLM, list[tuple[str, str]]]:
    """A runner whose `faux` model falls back to `backup` on another provider; also the
    (model, fallback) pairs its `on_fallback` hook reported."""
    store = await SQLiteStore.open(db)
    first = FauxLLM(primary, chunk_size=3, delay=delay)
    spare = FauxLLM(backup, chunk_size=3, delay=delay, provider="spare")
    server = Server(store=store, llm=first, runner=None)  # type: ignore[arg-type]
    fallen: list[tuple[str, str]] = []
    services = RunnerServices(
        models={PRIMARY.id: PRIMARY, BACKUP.id: BACKUP},
        store=store,
        llm_for=lambda model: spare if model.id == BACKUP.id else first,
        on_run_end=server.summaries.append,
        on_fallback=lambda model, fallback: fallen.append((model, fallback)),
    )
    server.runner = new_runner(services)
    return server, spare, fallen


async def test_the_fallback_goes_to_its_own_provider_and_is_recorded_for_it(
    tmp_path: Path,
) -> None:
    server, spare, fallen = await two_providers(
        tmp_path / "db", [DOWN], [FauxResponse.text("spare")]
    )
    client = Client("r1")
    client.say(run_request("c1", "hi"))
    server.start(client)
    assert await client.ended() is None
    assert client.text() == "spare"
    assert len(server.llm.calls) == 1 and len(spare.calls) == 1
    assert spare.calls[0].prepared.model == "spare-model"
    assert server.llm.calls[0].prepared.model == "faux-model"  # each prepared for its model
    assert spare.requests[0] == server.llm.requests[0]  # of the same request
    first = await server.store.get_llm_call("c1:1:llm1")
    fallback = await server.store.get_llm_call("c1:1:llm1:fb1")
    assert first is not None and fallback is not None
    assert (first.provider, first.model, first.status, first.error) == (
        "faux",
        "faux-model",
        "failed",
        "faux: HTTP 503",
    )
    assert (fallback.provider, fallback.model, fallback.status) == (
        "spare",
        "spare-model",
        "committed",
    )
    await asyncio.sleep(0)
    assert fallen == [("faux", "backup")]
    assert server.summaries[-1].fallbacks == 1


async def test_a_fallback_resumed_after_a_restart_resends_its_own_bytes(tmp_path: Path) -> None:
    db = tmp_path / "db"
    first, spare, _ = await two_providers(db, [DOWN], [FauxResponse.text("slow " * 40)], delay=0.02)
    client = Client("r1")
    client.say(run_request("c1", "question"))
    first.start(client, transport="runsse")
    await client.until(lambda: len(client.sent) >= 2, "the fallback's stream")
    await first.crash()
    await first.store.close()

    second, spare2, _ = await two_providers(db, [], [FauxResponse.text("the answer")])
    again = Client("r1")
    second.start(again, transport="runsse")
    assert await again.ended() is None
    assert again.text().endswith("the answer")
    assert second.llm.calls == []  # the first model is not asked again for this step
    assert [c.prepared.body for c in spare2.calls] == [spare.calls[0].prepared.body]
    record = await second.store.get_llm_call("c1:1:llm1:fb1")
    assert record is not None and record.status == "committed" and record.provider == "spare"
