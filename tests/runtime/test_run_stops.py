"""A run whose client's stream is gone for good, or whose server stops, in process: the loop's
input for each cause, the call's stream aborted at once, its record with the usage known so
far and the true reason, nothing left "planned", and the run's summary saying why. A run whose
task is cancelled before the loop heard anything still records its call, with the cause the
transport gave, never "the server is shutting down" for all."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import Usage
from cursor_byok.loop.results import CALL_SHUTDOWN, CALL_STREAM_CLOSED
from cursor_byok.store.api import LLMCallRecord
from cursor_byok.transport.connect.channel import Gone, StreamGone
from cursor_byok.transport.runtime import records
from tests.runtime.harness import Client, Server, open_server, run_request

ANSWER = "a long answer that goes on " * 20  # 540 characters, 180 deltas of 3


async def streaming(tmp_path: Path, *, usage: Usage | None = None) -> tuple[Server, Client]:
    server = await open_server(
        tmp_path / "db", [FauxResponse.text(ANSWER, usage=usage)], chunk_size=3, delay=0.02
    )
    client = Client("r1")
    client.say(run_request("c1"))
    server.start(client)
    await client.until(lambda: len(client.sent) >= 4, "four deltas")
    return server, client


async def the_call(server: Server) -> LLMCallRecord:
    for _ in range(100):
        (call,) = await server.store.list_recent_llm_calls()
        if call.status != "planned":
            return call
        await asyncio.sleep(0.02)
    raise AssertionError(f"the call stayed planned: {call}")


async def test_a_closed_stream_cancels_the_turn_and_records_what_streamed(tmp_path: Path) -> None:
    server, client = await streaming(tmp_path)
    client.lose(StreamGone(Gone.CLOSED))
    ending = await client.ended()
    assert ending is not None and (ending.code, ending.message) == ("canceled", CALL_STREAM_CLOSED)
    stream = server.llm.streams[0]
    await asyncio.sleep(0.05)
    assert stream._aborted  # the stream was closed by the loop's decision
    call = await the_call(server)
    deltas = stream._asm.streamed_deltas
    planned = records.estimated_input(call)
    assert planned > 0
    assert (call.status, call.error) == ("canceled", CALL_STREAM_CLOSED)
    assert (call.input_tokens, call.output_tokens) == (planned, deltas)
    assert call.estimated_tokens == "input,output"
    record = await server.store.load("c1")
    assert record is not None and b'"status":"Canceled"' in record.state
    (summary,) = server.summaries
    assert (summary.outcome, summary.error, summary.llm_calls) == (
        "canceled",
        CALL_STREAM_CLOSED,
        1,
    )
    assert summary.usage == Usage(input=planned, output=deltas)
    await server.store.close()


async def test_the_providers_early_count_wins_over_the_estimate(tmp_path: Path) -> None:
    # The faux provider reports its usage at the start (as Anthropic's message_start does).
    server, client = await streaming(tmp_path, usage=Usage(input=321, output=1, cache_read=40))
    client.lose(StreamGone(Gone.CLOSED))
    await client.ended()
    call = await the_call(server)
    deltas = server.llm.streams[0]._asm.streamed_deltas
    assert (call.input_tokens, call.cache_read_tokens, call.output_tokens) == (321, 40, deltas)
    assert call.estimated_tokens == "output"
    await server.store.close()


async def test_a_shutdown_ends_the_call_and_keeps_the_turn(tmp_path: Path) -> None:
    server, client = await streaming(tmp_path)
    before = await server.store.load("c1")
    client.lose(StreamGone(Gone.SHUTDOWN))
    ending = await client.ended()
    assert ending is not None and ending.message == CALL_SHUTDOWN
    # Recorded before the run ended (the loop's end of the call, saved on its own), not by
    # what a run does with calls left planned once it is over.
    (call,) = await server.store.list_recent_llm_calls()
    assert (call.status, call.error) == ("canceled", CALL_SHUTDOWN)
    after = await server.store.load("c1")
    assert after == before  # nothing committed: a reopened run sends the call again
    assert after is not None and b'"status":"WaitingLLM"' in after.state
    (summary,) = server.summaries
    assert (summary.outcome, summary.error) == ("canceled", CALL_SHUTDOWN)
    await server.store.close()


async def test_a_cancelled_run_records_its_call_with_the_cause_it_was_given(
    tmp_path: Path,
) -> None:
    """The transport ends a run (here: its output too big) and cancels its task: the run
    heard why first; its call ends with that reason, saved before the runner closes."""
    server, client = await streaming(tmp_path)
    client.lose(StreamGone(Gone.FAILED, detail="the run's output exceeds 1 MiB"))
    (task,) = server.tasks
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await server.runner.close()  # the records of runs that ended abruptly are saved
    why = "the transport ended the run: the run's output exceeds 1 MiB"
    (call,) = await server.store.list_recent_llm_calls()
    assert (call.status, call.error) == ("canceled", why)
    assert call.output_tokens and call.estimated_tokens == "input,output"
    (summary,) = server.summaries
    assert (summary.outcome, summary.error, summary.llm_calls) == ("canceled", why, 1)
    assert "shutting down" not in (summary.error or "")
    await server.store.close()
