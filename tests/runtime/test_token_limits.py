"""The limits of a person token, in-process with an injected clock (`RunnerServices.now_ms`):
its models, its monthly budget (UTC calendar months; checked before each model call, a call
already sent finishes) and its rate. The real server over HTTP: tests/e2e/test_tokens.py."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from cursor_byok.llm.faux import FauxLLM, FauxResponse
from cursor_byok.llm.models import Model, Prices
from cursor_byok.llm.types import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from cursor_byok.loop import ConversationState, MeterBasis, Status, TurnStart
from cursor_byok.store.api import AccessTokenRecord
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.connect.channel import EndError
from cursor_byok.transport.connect.sessions import RunStartInfo
from cursor_byok.transport.cursor.proto import aiserver_pb2
from cursor_byok.transport.runtime import Runner, RunnerServices, new_runner, records
from cursor_byok.transport.runtime.access import month_window
from tests.runtime.harness import MODEL, Client, read_ok, run_request, shell_ok

SHELL_HI = "Exit code: 0\nstdout:\nhi"

# $1 per output token, at most 4 of them: each scripted answer below costs what its `output`
# says, and each call reserves $4 of a budget until it finishes (reservations.py; the input is
# free, so the request's size adds nothing to that bound).
CAP = 4
CAPPED = msgspec.structs.replace(MODEL.settings, max_output_tokens=CAP)
PRICED = msgspec.structs.replace(MODEL, prices=Prices(output=1_000_000.0), settings=CAPPED)
OTHER = Model(
    id="other",
    display_name="Other",
    provider=MODEL.provider,
    settings=CAPPED,
    context_window=100_000,
    prices=Prices(output=1_000_000.0),
    aliases=("fast",),
)


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def costing(dollars: int, text: str = "ok") -> FauxResponse:
    return FauxResponse.text(text, usage=Usage(output=dollars))


class Clock:
    def __init__(self, at: str) -> None:
        self.now = ms(at)

    def __call__(self) -> int:
        return self.now


async def open_runner(
    db: Path, script: list[FauxResponse], now_ms: Callable[[], int]
) -> tuple[Runner, SQLiteStore]:
    store = await SQLiteStore.open(db)
    llm = FauxLLM(script, chunk_size=50)
    services = RunnerServices(
        models={PRICED.id: PRICED, OTHER.id: OTHER},
        store=store,
        llm_for=lambda _model: llm,
        now_ms=now_ms,
    )
    return new_runner(services), store


async def add_token(store: SQLiteStore, **kw: object) -> None:
    values: dict[str, object] = {
        "token_id": "tok_alice",
        "name": "alice",
        "secret_hash": "0" * 64,
        "created_at_ms": 0,
    }
    values.update(kw)
    assert (await store.add_access_token(AccessTokenRecord(**values))).outcome == "inserted"  # type: ignore[arg-type]


async def turn(
    runner: Runner,
    request_id: str,
    conversation_id: str,
    *,
    model_id: str = PRICED.id,
    text: str = "hi",
    client: Client | None = None,
) -> tuple[Client, EndError | None]:
    client = client or Client(request_id)
    message = run_request(conversation_id, text)
    message.run_request.requested_model.model_id = model_id
    client.say(message)
    info = RunStartInfo(request_id=request_id, transport="run", principal="tok_alice")
    await runner.handle(client, info)
    return client, await client.ended()


def test_months_are_utc_calendar_months() -> None:
    assert month_window(ms("2026-12-31T23:59:59")) == (
        ms("2026-12-01T00:00:00"),
        ms("2027-01-01T00:00:00"),
        "2026-12",
    )
    assert month_window(ms("2027-01-01T00:00:00"))[2] == "2027-01"


async def test_budget_crossed_mid_month_refuses_the_next_call_and_renews_next_month(
    tmp_path: Path,
) -> None:
    clock = Clock("2026-01-31T23:58:00")
    read = dataclasses.replace(
        FauxResponse.tool_calls([("Read", {"path": "a.py"})]), usage=Usage(output=3)
    )
    runner, store = await open_runner(
        tmp_path / "db", [costing(1), read, costing(1, "renewed")], clock
    )
    await add_token(store, budget_usd=6.0)
    _, end = await turn(runner, "r1", "c1")
    assert end is None  # $4 reserved of $6, settled to its $1
    (first,) = await store.list_recent_llm_calls()
    assert (first.reserved_usd, first.cost_usd, first.status) == (4.0, 1.0, "committed")
    # The second turn's first call fits ($1 spent + $4 reserved) and costs $3: it finishes,
    # its tool runs; the call after the tool result could cost $4 more than the $4 spent, so
    # it is refused before it goes out: the budget is never overspent.
    client, end = await turn(runner, "r2", "c2", client=Client("r2", answers=[read_ok("x\n")]))
    assert "exec read_args" in client.kinds()
    assert end is not None and end.code == "resource_exhausted"
    assert end.message == (
        "token 'alice' has too little of its monthly budget left for this model call: $4.00 "
        "spent and $0.00 held by calls in flight of $6.00 in 2026-01 (UTC), and the call may "
        "cost up to $4.00; it renews on 2026-02-01"
    )
    clock.now = ms("2026-01-31T23:59:59")
    _, end = await turn(runner, "r3", "c3")
    assert end is not None and end.code == "resource_exhausted"
    clock.now = ms("2026-02-01T00:00:00")  # a new month: nothing spent in it yet
    client, end = await turn(runner, "r4", "c4")
    assert end is None and client.text() == "renewed"
    (usage,) = await store.token_usage(ms("2026-01-01T00:00:00"), ms("2026-02-01T00:00:00"))
    assert (usage.token_id, usage.llm_calls, usage.cost_usd) == ("tok_alice", 2, 4.0)
    (february,) = await store.token_usage(*month_window(clock.now)[:2], token_id="tok_alice")
    assert (february.llm_calls, february.cost_usd) == (1, 1.0)
    await store.close()


async def test_rate_limit_counts_model_calls_in_the_last_minute(tmp_path: Path) -> None:
    clock = Clock("2026-03-10T12:00:00")
    runner, store = await open_runner(tmp_path / "db", [costing(0)] * 3, clock)
    await add_token(store, rpm=2)
    assert (await turn(runner, "r1", "c1"))[1] is None
    clock.now += 30_000
    assert (await turn(runner, "r2", "c2"))[1] is None
    _, end = await turn(runner, "r3", "c3")
    assert end is not None and end.code == "resource_exhausted"
    assert end.message == (
        "token 'alice' is over its rate limit of 2 model calls per minute; try again in 30 s"
    )
    clock.now += 30_000  # the first call is a minute old
    assert (await turn(runner, "r4", "c4"))[1] is None
    await store.close()


async def test_models_limit_resolves_aliases_and_refuses_others(tmp_path: Path) -> None:
    clock = Clock("2026-03-10T12:00:00")
    runner, store = await open_runner(tmp_path / "db", [costing(0, "from other")], clock)
    await add_token(store, models=("fast",))
    client, end = await turn(runner, "r1", "c1", model_id=PRICED.id)
    assert end is not None and end.code == "permission_denied"
    assert end.message == "token 'alice' may not use model 'faux' (its models limit: fast)"
    assert client.kinds() == []  # refused before anything was sent or stored
    assert await store.load("c1") is None
    client, end = await turn(runner, "r2", "c2", model_id="FAST")
    assert end is None and client.text() == "from other"
    (call,) = await store.list_recent_llm_calls()
    assert (call.model, call.token_id) == ("faux-model", "tok_alice")
    await store.close()


async def test_a_revoked_token_is_refused_at_its_next_call(tmp_path: Path) -> None:
    clock = Clock("2026-03-10T12:00:00")
    runner, store = await open_runner(tmp_path / "db", [costing(0)] * 2, clock)
    await add_token(store)
    assert (await turn(runner, "r1", "c1"))[1] is None
    assert await store.revoke_access_token("alice", clock.now) is not None
    _, end = await turn(runner, "r2", "c2")
    assert end is not None and end.code == "unauthenticated"
    assert end.message == "token 'alice' was revoked; ask for a new one"
    details = aiserver_pb2.ErrorDetails.FromString(end.details or b"")
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_UNAUTHORIZED
    assert details.details.title == "Token revoked"
    await store.close()


async def test_a_budget_needs_prices(tmp_path: Path) -> None:
    clock = Clock("2026-03-10T12:00:00")
    store = await SQLiteStore.open(tmp_path / "db")
    llm = FauxLLM([costing(0)])
    runner = new_runner(
        RunnerServices(models={MODEL.id: MODEL}, store=store, llm_for=lambda _m: llm, now_ms=clock)
    )
    await add_token(store, budget_usd=10.0)
    _, end = await turn(runner, "r1", "c1", model_id=MODEL.id)
    assert end is not None and end.code == "resource_exhausted"
    assert "has no prices configured" in end.message
    await store.close()


async def test_a_subagent_run_without_a_token_counts_toward_its_parents(tmp_path: Path) -> None:
    clock = Clock("2026-03-10T12:00:00")
    read = FauxResponse.tool_calls([("Read", {"path": "a.py"})])
    runner, store = await open_runner(tmp_path / "db", [read, costing(2, "child")], clock)
    await add_token(store, models=("fast",))
    parent = Client("parent")
    parent.hold_execs = True  # the parent waits on its tool while its child runs
    message = run_request("c-parent", "go")
    message.run_request.requested_model.model_id = "fast"
    parent.say(message)
    info = RunStartInfo(request_id="parent", transport="run", principal="tok_alice")
    task = asyncio.create_task(runner.handle(parent, info))
    await parent.until(lambda: bool(parent.held), "the parent's tool call")
    # A child made with the operator's token (no principal) names its parent: alice's limits
    # and attribution apply. Its model is outside alice's: refused, naming alice.
    child = Client("child")
    child_message = run_request("c-child", "help")
    child_message.run_request.requested_model.model_id = "faux"
    child.say(child_message)
    headers = {"x-parent-request-id": "parent"}
    await runner.handle(child, RunStartInfo(request_id="child", transport="run", headers=headers))
    ending = await child.ended()
    assert ending is not None and ending.code == "permission_denied"
    assert "token 'alice' may not use model 'faux'" in ending.message
    # On alice's model, the child's call is alice's.
    child2 = Client("child2")
    child2_message = run_request("c-child2", "help")
    child2_message.run_request.requested_model.model_id = "fast"
    child2.say(child2_message)
    await runner.handle(child2, RunStartInfo(request_id="child2", transport="run", headers=headers))
    assert await child2.ended() is None and child2.text() == "child"
    assert [c.token_id for c in await store.list_recent_llm_calls()] == ["tok_alice", "tok_alice"]
    # The helper's conversation is its parent's person's (ownership follows the token).
    child_head = await store.head("c-child2")
    assert child_head is not None and child_head.owner_id == "tok_alice"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # A parent that is not running here lends nothing: no limits.
    assert runner.token_of_run("", "parent") is None
    assert runner.token_of_run("tok_bob", "parent") == "tok_bob"
    await store.close()


async def test_a_fallback_outside_the_models_limit_serves_and_counts(tmp_path: Path) -> None:
    """The models limit is the model a run asks for: the operator's fallback may serve it,
    recorded under the token, and its cost counts toward the budget."""
    clock = Clock("2026-03-10T12:00:00")
    primary = msgspec.structs.replace(PRICED, fallbacks=("other",))
    store = await SQLiteStore.open(tmp_path / "db")
    first = FauxLLM([FauxResponse.error("faux: HTTP 503", started=False)])
    spare = FauxLLM([costing(3, "from the fallback")], provider="spare")
    runner = new_runner(
        RunnerServices(
            models={primary.id: primary, OTHER.id: OTHER},
            store=store,
            llm_for=lambda model: spare if model.id == OTHER.id else first,
            now_ms=clock,
        )
    )
    # The failed call's $4 reservation settles to $0 in the commit planning the fallback.
    await add_token(store, models=(PRICED.id,), budget_usd=5.0)
    client, end = await turn(runner, "r1", "c1")
    assert end is None and client.text() == "from the fallback"
    calls = {c.call_id: c for c in await store.list_recent_llm_calls()}
    assert {c.token_id for c in calls.values()} == {"tok_alice"}
    assert calls["c1:1:llm1:fb1"].cost_usd == 3.0
    assert await store.token_spend("tok_alice", *month_window(clock.now)[:2]) == 3.0
    _, end = await turn(runner, "r2", "c2")
    assert end is not None and end.code == "resource_exhausted"  # $3 + up to $4 > $5
    await store.close()


async def test_a_compaction_summary_call_counts_toward_the_token(tmp_path: Path) -> None:
    """/summarize under a token: the summary call (on the operator's compaction model, outside
    the token's models) is admitted, recorded under the token and priced into its spend."""
    clock = Clock("2026-03-10T12:00:00")
    primary = msgspec.structs.replace(PRICED, compaction_model=OTHER.id)
    store = await SQLiteStore.open(tmp_path / "db")
    llm = FauxLLM([costing(1, "one"), costing(1, "two"), costing(5, "the summary")])
    runner = new_runner(
        RunnerServices(
            models={primary.id: primary, OTHER.id: OTHER},
            store=store,
            llm_for=lambda _model: llm,
            now_ms=clock,
        )
    )
    await add_token(store, models=(PRICED.id,))
    for n in (1, 2):
        assert (await turn(runner, f"r{n}", "c1", text=f"turn {n}"))[1] is None
    client = Client("r-sum")
    message = run_request("c1")
    message.run_request.requested_model.model_id = PRICED.id
    message.run_request.action.summarize_action.SetInParent()
    client.say(message)
    await runner.handle(
        client, RunStartInfo(request_id="r-sum", transport="run", principal="tok_alice")
    )
    assert await client.ended() is None
    (summary,) = [c for c in await store.list_recent_llm_calls() if ":summary" in c.call_id]
    assert (summary.token_id, summary.cost_usd, summary.status) == ("tok_alice", 5.0, "committed")
    assert await store.token_spend("tok_alice", *month_window(clock.now)[:2]) == 7.0
    await store.close()


async def test_a_refused_call_keeps_the_tool_answer_before_it(tmp_path: Path) -> None:
    """A Shell call answered `hi`, then the next model call refused for the budget: the loop
    commits the answer with the failed turn, so the next run's model reads it (never a false
    "its answer was lost" note)."""
    clock = Clock("2026-01-15T12:00:00")
    shell = dataclasses.replace(
        FauxResponse.tool_calls([ToolCall(id="sh1", name="Shell", arguments={"command": "x"})]),
        usage=Usage(output=3),
    )
    store = await SQLiteStore.open(tmp_path / "db")
    llm = FauxLLM([shell, costing(0, "it printed hi")], chunk_size=50)
    runner = new_runner(
        RunnerServices(
            models={PRICED.id: PRICED}, store=store, llm_for=lambda _m: llm, now_ms=clock
        )
    )
    await add_token(store, budget_usd=5.0)
    client, end = await turn(runner, "r1", "c1", client=Client("r1", answers=[shell_ok("hi")]))
    assert "exec shell_stream_args" in client.kinds()
    assert end is not None and end.code == "resource_exhausted"
    assert end.message == (
        "token 'alice' has too little of its monthly budget left for this model call: $3.00 "
        "spent and $0.00 held by calls in flight of $5.00 in 2026-01 (UTC), and the call may "
        "cost up to $4.00; it renews on 2026-02-01"
    )
    record = await store.load("c1")
    assert record is not None
    state = records.decode_state(record.state, record.messages)
    user, asked, answer = state.log
    assert asked == AssistantMessage(
        content=(ToolCall(id="sh1", name="Shell", arguments={"command": "x"}),),
        api="faux",
        provider="faux",
        model="faux-model",
        usage=Usage(output=3),
        stop_reason="toolUse",
    )
    assert answer == ToolResultMessage(
        tool_call_id="sh1", tool_name="Shell", content=(TextContent(text=SHELL_HI),)
    )
    (first,) = await store.list_recent_llm_calls()
    breakdown = first.prompt_breakdown
    assert breakdown is not None
    # The whole state: the turn failed after its second call was refused; the answer is in
    # the history; nothing waits, nothing is queued.
    assert state == ConversationState(
        conversation_id="c1",
        turn_id="c1:1",
        messages=state.log,
        log=(UserMessage.of_text("hi"), asked, answer),
        waiting=None,
        status=Status.FAILED,
        last_commit_id="c1@4",
        turn=1,
        commit=4,
        llm_calls=2,
        context=state.context,  # the run request's (tests/cursor)
        turn_starts=(TurnStart(view=()),),  # one turn, begun from nothing
        # the meter of the call that answered: its request's chars (its usage has no prompt
        # tokens, so the estimate stands)
        meter_basis=MeterBasis(chars=records.decode_call_meter(breakdown).chars, used=0),
    )
    assert user == UserMessage.of_text("hi")
    # The refused call never went out and has no record; the Shell call's record is done.
    (call,) = await store.list_recent_llm_calls()
    assert (call.call_id, call.status, call.cost_usd) == ("c1:1:llm1", "committed", 3.0)
    operation = await store.get_client_operation("c1:1:llm1:sh1")
    assert operation is not None and operation.status == "completed"
    # A new month: the next run's model reads the answer, and no "lost" note.
    clock.now = ms("2026-02-01T00:00:00")
    client, end = await turn(runner, "r2", "c1", text="what did it print?")
    assert end is None and client.text() == "it printed hi"
    assert llm.calls[1].request.messages == (
        UserMessage.of_text("hi"),
        asked,
        answer,
        UserMessage.of_text("what did it print?"),
    )
    await store.close()


async def test_a_resumed_call_refused_fails_the_turn_and_ends_its_record(tmp_path: Path) -> None:
    """A run reopened after a restart mid-call, its token revoked meanwhile: the resent call
    is refused, the loop fails the turn (committed) and the call's record ends failed, never
    left planned."""
    clock = Clock("2026-03-10T12:00:00")
    db = tmp_path / "db"
    store = await SQLiteStore.open(db)
    slow = FauxLLM([FauxResponse.text("never finished " * 30)], chunk_size=3, delay=0.02)
    runner = new_runner(
        RunnerServices(
            models={PRICED.id: PRICED}, store=store, llm_for=lambda _m: slow, now_ms=clock
        )
    )
    await add_token(store)
    client = Client("r1")
    message = run_request("c1", "question")
    message.run_request.requested_model.model_id = PRICED.id
    client.say(message)
    info = RunStartInfo(request_id="r1", transport="runsse", principal="tok_alice")
    task = asyncio.create_task(runner.handle(client, info))
    await client.until(lambda: len(client.sent) >= 2, "the stream")
    task.cancel()  # the process dies mid-call
    await asyncio.gather(task, return_exceptions=True)
    assert await store.revoke_access_token("alice", clock.now) is not None
    await store.close()

    store = await SQLiteStore.open(db)
    never = FauxLLM([FauxResponse.text("must not be called")])
    runner = new_runner(
        RunnerServices(
            models={PRICED.id: PRICED}, store=store, llm_for=lambda _m: never, now_ms=clock
        )
    )
    again = Client("r1")  # reopened: the run request comes from the store
    await runner.handle(again, info)
    end = await again.ended()
    assert end is not None and end.code == "unauthenticated"
    assert end.message == "token 'alice' was revoked; ask for a new one"
    assert never.calls == [] and again.kinds() == []
    record = await store.load("c1")
    assert record is not None
    state = records.decode_state(record.state, record.messages)
    assert (state.status, state.waiting, state.log) == (
        Status.FAILED,
        None,
        (UserMessage.of_text("question"),),
    )
    call = await store.get_llm_call("c1:1:llm1")
    assert call is not None
    assert (call.status, call.error) == ("failed", "token 'alice' was revoked; ask for a new one")
    await store.close()
