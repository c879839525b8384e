"""A tool the client never answers becomes an error result for the model, not a hung turn."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.test_shim import (
    ShimRun,
    chat_requests,
    exec_of,
    http,
    is_kind,
    run_request,
    unique,
)
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def quick_server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("timeout")
    config = brain_config(upstream.base_url, db=work / "db", extra="tool_timeout_s = 1.0")
    with server_process(config, work) as srv:
        yield srv


async def test_unanswered_tool_times_out_into_an_error_result(
    quick_server: ServerProcess, upstream: FakeUpstream
) -> None:
    prompt = unique('[tool Read {"path": "never-answered.txt"}]')
    async with http(quick_server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            ask = await reader.wait_for(exec_of("read_args"))
            exec_id = ask.exec_server_message.id
            end = await reader.wait_end(15)  # the client stays silent
    assert end == {} and reader.turn_ended
    aborts = [
        m.exec_server_control_message.abort.id
        for m in reader.messages
        if is_kind("exec_server_control_message.abort")(m)
    ]
    assert aborts == [exec_id]
    completed = [m for m in reader.messages if is_kind("interaction_update.tool_call_completed")(m)]
    assert len(completed) == 1
    _first, second = chat_requests(upstream, prompt)
    tool = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and "did not answer" in tool[0]["content"]
