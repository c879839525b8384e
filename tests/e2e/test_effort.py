"""Issue 24 §5: the IDE's thinking picker, end to end (the real server process, the scripted
brain upstream): AvailableModels describes the efforts a reasoning model offers, and the
effort a run's requested_model asks for (over HTTP/2 `Run`) is the one upstream gets; one the
model does not offer leaves its configured effort."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from tests.e2e.test_forks import Client
from tests.e2e.test_modes_actions import last_checkpoint, moded_request
from tests.e2e.test_shim import chat_requests, unique
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

THINKER = """
[models."brain-think"]
provider = "brain"
model = "brain-1"
reasoning = true
reasoning_effort = "medium"
efforts = ["low", "medium", "high"]
"""


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work: Path = tmp_path_factory.mktemp("effort")
    text = brain_config(upstream.base_url, db=work / "byok.db") + THINKER
    with server_process(text, work) as srv:
        yield srv


async def test_available_models_publish_each_models_efforts(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        answer = await cc.unary(
            http,
            "/aiserver.v1.AiService/AvailableModels",
            aiserver_pb2.AvailableModelsRequest(),
            aiserver_pb2.AvailableModelsResponse,
        )
    models = {m.name: m for m in answer.models}
    assert answer.use_model_parameters
    (picker,) = models["brain-think"].parameter_definitions
    assert picker.id == "effort"
    values = [v.value for v in picker.parameter_type.enum_parameter.values]
    assert values == ["low", "medium", "high"]
    defaults = [v for v in models["brain-think"].variants if v.is_default_non_max_config]
    assert [p.value for d in defaults for p in d.parameter_values] == ["medium"]
    assert list(models["brain-1"].parameter_definitions) == []  # not a reasoning model


def _asking(text: str, cid: str, state: Any, **parameters: str) -> agent_pb2.AgentClientMessage:
    message = moded_request(text, "agent", cid, state=state)
    rm = message.run_request.requested_model
    rm.model_id = "brain-think"
    for key, value in parameters.items():
        rm.parameters.add(id=key, value=value)
    return message


async def test_the_pickers_effort_is_the_one_upstream_gets(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    client = Client(server)
    cid = str(uuid.uuid4())
    state = None
    sent: list[dict[str, Any]] = []
    for parameters, expected in (
        ({"effort": "high", "fast": "false"}, "high"),
        ({"effort": "xhigh"}, "medium"),  # not offered: the configured effort
        ({"reasoning": "low"}, "low"),  # OpenAI models' id for the same picker
        ({}, "medium"),
    ):
        text = unique("think about it")
        reader = await client.run(_asking(text, cid, state, **parameters))
        state = last_checkpoint(reader)
        (body,) = chat_requests(upstream, text)
        assert body["reasoning_effort"] == expected, (parameters, body.get("reasoning_effort"))
        sent.append(body)
    # A change of effort changes only that field: the history still extends the one before.
    for earlier, later in itertools.pairwise(sent):
        n = len(earlier["messages"])
        assert json.dumps(later["messages"][:n]) == json.dumps(earlier["messages"])
