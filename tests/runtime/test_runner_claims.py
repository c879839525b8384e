"""The runner's replica claims (runner.py): a run announces its claim, takes the
conversation's hold (waiting while another replica's run gives way, at most
supersede_timeout_s) and lets go when it ends; a claim heard from another replica makes the run
here give way (a newer run) or stop deciding nothing (the same run, reopened there)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cursor_byok.loop import SuspendCause
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.runtime import Runner, RunnerServices
from cursor_byok.transport.runtime.runner import ActiveRun
from tests.runtime.harness import MODEL, Client


@dataclass
class Claims:
    """ConversationClaims in memory: the holds of the other replicas are `taken_elsewhere`."""

    announced: list[tuple[str, str]] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    released: list[str] = field(default_factory=list)
    taken_elsewhere: set[str] = field(default_factory=set)
    tries: int = 0
    fail: bool = False

    async def announce_claim(self, conversation_id: str, claimant: str) -> None:
        if self.fail:
            raise OSError("the database is gone")
        self.announced.append((conversation_id, claimant))

    async def watch_claims(self, on_claim: Callable[[str, str], None]) -> None:
        return None

    async def hold_conversation(self, conversation_id: str) -> bool:
        self.tries += 1
        if conversation_id in self.taken_elsewhere:
            return False
        self.held.add(conversation_id)
        return True

    async def release_conversation(self, conversation_id: str) -> None:
        self.held.discard(conversation_id)
        self.released.append(conversation_id)


class FakeRun:
    """What the runner sees of a run (ActiveRun), recording what it was told."""

    def __init__(self, request_id: str) -> None:
        self.channel = Client(request_id)
        self.ended = asyncio.Event()
        self.told: list[str] = []

    async def serve(self) -> None:
        await self.ended.wait()

    def close(self) -> None:
        pass

    def supersede(self) -> None:
        self.told.append("supersede")
        self.ended.set()

    def suspend(self, cause: SuspendCause) -> None:
        self.told.append(f"suspend {cause}")

    def cancel_as_child(self) -> None:
        self.told.append("cancel")

    def show_helper_progress(self, frame: bytes) -> None:
        self.told.append("progress")


def make_run(runner: Runner, channel: object, **_: object) -> ActiveRun:
    raise AssertionError("these tests hand the runner their runs")


async def runner_with(tmp_path: Path, claims: Claims, timeout_s: float = 5.0) -> Runner:
    store = await SQLiteStore.open(tmp_path / "db")
    services = RunnerServices(
        models={MODEL.id: MODEL},
        store=store,
        llm_for=lambda _m: None,  # type: ignore[arg-type,return-value]
        supersede_timeout_s=timeout_s,
        claims=claims,
    )
    return Runner(services, make_run)  # type: ignore[arg-type]


async def test_a_claim_is_announced_held_and_let_go(tmp_path: Path) -> None:
    claims = Claims()
    runner = await runner_with(tmp_path, claims)
    run = FakeRun("r1")
    lock = await runner.claim(run, "c1")
    assert claims.announced == [("c1", f"{runner.replica} r1")]
    assert claims.held == {"c1"} and not lock.locked()
    # A newer run of it here: the older gives way; the hold is this process's already.
    newer = FakeRun("r2")
    await runner.claim(newer, "c1")
    assert run.told == ["supersede"] and claims.tries == 1
    runner.release(run, "c1")  # not the holder any more: nothing let go
    assert claims.released == []
    runner.release(newer, "c1")
    await asyncio.sleep(0.01)
    assert (claims.held, claims.released) == (set(), ["c1"])
    await runner.services.store.close()


async def test_a_hold_taken_elsewhere_is_waited_for_then_the_run_goes_on(
    tmp_path: Path,
) -> None:
    claims = Claims(taken_elsewhere={"c1"})
    runner = await runner_with(tmp_path, claims, timeout_s=0.3)
    claiming = asyncio.ensure_future(runner.claim(FakeRun("r1"), "c1"))
    await asyncio.sleep(0.12)
    assert not claiming.done() and claims.tries > 1  # tried again while it waits
    claims.taken_elsewhere.clear()  # the other replica's run gave way
    await asyncio.wait_for(claiming, 1)
    assert claims.held == {"c1"}
    # Never let go elsewhere: past supersede_timeout_s the run goes on without the hold.
    claims.taken_elsewhere.add("c2")
    await asyncio.wait_for(runner.claim(FakeRun("r2"), "c2"), 1)
    assert claims.held == {"c1"}
    await runner.services.store.close()


async def test_a_claim_that_cannot_be_announced_still_serves(tmp_path: Path) -> None:
    claims = Claims(fail=True)
    runner = await runner_with(tmp_path, claims)
    lock = await runner.claim(FakeRun("r1"), "c1")
    assert isinstance(lock, asyncio.Lock) and claims.held == set()
    await runner.services.store.close()


async def test_claims_heard_from_other_replicas(tmp_path: Path) -> None:
    claims = Claims()
    runner = await runner_with(tmp_path, claims, timeout_s=0.05)
    run = FakeRun("r1")
    await runner.claim(run, "c1")
    runner.on_claim("c1", f"{runner.replica} r9")  # our own claim, heard back: nothing
    runner.on_claim("c2", "other r9")  # a conversation with no run here: nothing
    assert run.told == []
    # The same run reopened on the other replica: this one stops, deciding nothing (a run
    # task is known for it: it is cancelled should it not end by itself).
    task = asyncio.ensure_future(run.serve())
    runner._tasks[run] = task
    runner.on_claim("c1", "other r1")
    assert run.told == [f"suspend {SuspendCause.MOVED}"]
    await asyncio.sleep(0.15)
    assert task.cancelled()
    # A newer run there: this one gives way.
    runner.on_claim("c1", "other r2")
    assert run.told[-1] == "supersede"
    await runner.services.store.close()
