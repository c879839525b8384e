"""The README tells the truth: its configurations parse and serve, its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from cursor_byok.config import parse_config
from cursor_byok.transport.cursor.proto import agent_pb2
from tests.support.connect_client import unary
from tests.support.live import REPO, server_process

README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"```toml\n(.*?)```", README, flags=re.S)
PROVIDER_BLOCKS = [b for b in BLOCKS if "[providers." in b]
ENV = {
    "OPENAI_API_KEY": "sk-readme-test-openai",
    "ANTHROPIC_API_KEY": "sk-ant-readme-test",
    "GEMINI_API_KEY": "readme-test-gemini",
}


def test_readme_has_the_two_setup_commands_and_they_exist() -> None:
    setup = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^    (\S.*)$", setup, flags=re.M)
    assert commands == ["scripts/serve", "scripts/test"]
    for command in commands:
        path = REPO / command
        assert path.is_file() and path.stat().st_mode & 0o111, command
    assert "scripts/test" in (REPO / ".ci" / "run").read_text()


def test_one_config_per_kind_of_provider() -> None:
    apis = sorted(re.search(r'api = "([^"]+)"', b).group(1) for b in PROVIDER_BLOCKS)  # type: ignore[union-attr]
    assert apis == ["anthropic", "gemini", "openai-chat", "openai-chat"]
    assert any("127.0.0.1:8080" in b for b in PROVIDER_BLOCKS)


@pytest.mark.parametrize("block", PROVIDER_BLOCKS, ids=lambda b: b.split("]")[0].strip("[ \n"))
async def test_each_readme_config_serves_its_model(block: str, tmp_path: Path) -> None:
    server = BLOCKS[0].replace('database = "cursor-byok.db"', f'database = "{tmp_path / "db"}"')
    config = parse_config(server + block, env=ENV)
    (model_id,) = config.models
    with server_process(server + block, tmp_path, env=ENV) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as client:
            reply = await unary(
                client,
                "/agent.v1.AgentService/GetUsableModels",
                agent_pb2.GetUsableModelsRequest(),
                agent_pb2.GetUsableModelsResponse,
            )
    assert [m.model_id for m in reply.models] == [model_id]
    log = srv.log()
    for key in ENV.values():
        assert key not in log
