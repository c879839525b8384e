"""The whole surface the Cursor CLI and IDE call, against a real server process, over HTTP/2
and HTTP/1.1 (docs/rpcs.md).

The CLI's start-up in a git workspace is replayed in the order peers recorded it: the bootstrap
order of the unattributed "Cursor agent backend protocol" write-up (server config, privacy
mode, the person, the models), then the calls a peer's issue tracker found the CLI to abort on
(leookun/cursor-byok #240: the team admin settings and the marketplaces at start-up; the team
repositories and the path keys of GetServerConfig in a git workspace), then a turn and the
session RPCs. Every answer is decoded with the newest public schema
(tests/support/public_schema.py): the declared response type, no field it does not know.
"""

from __future__ import annotations

import base64
import contextlib
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.transport.cursor.proto import aiserver_pb2
from cursor_byok.transport.runtime import records
from tests.e2e.test_context_meter import meter_of
from tests.e2e.test_crash_recovery import db_reader
from tests.e2e.test_modes_actions import moded_request, open_run
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.public_schema import decode, request_type
from tests.support.upstream import FakeUpstream

AGENT = "/agent.v1.AgentService/"
DASH = "/aiserver.v1.DashboardService/"
ANALYTICS = "/aiserver.v1.AnalyticsService/"
CONFIG = "/aiserver.v1.ServerConfigService/GetServerConfig"

# The CLI's start-up in a git workspace, in the order peers recorded (module docstring).
CLI_STARTUP = (
    CONFIG,
    DASH + "GetUserPrivacyMode",
    DASH + "GetMe",
    AGENT + "GetUsableModels",
    AGENT + "GetDefaultModelForCli",
    DASH + "GetTeamAdminSettingsOrEmptyIfNotInTeam",
    DASH + "ListMarketplaces",
    ANALYTICS + "BootstrapStatsig",
    ANALYTICS + "GetFirstWindowStatsigDecision",
    DASH + "GetEffectiveUserPlugins",
    DASH + "GetManagedSkills",
    DASH + "GetGlobalCommands",
    DASH + "GetTeamCommands",
    DASH + "GetTeams",
    DASH + "IsOnNewPricing",
    # the git workspace
    DASH + "GetTeamReposOrEmptyIfNotInTeam",
)
# The IDE's start-up: the same bootstrap, then its model picker and clock (the calls a peer's
# local backend answers for the IDE: Sakana-yuyu/cursor-byok).
IDE = "/aiserver.v1.AiService/"
IDE_STARTUP = (
    CONFIG,
    DASH + "GetUserPrivacyMode",
    DASH + "GetMe",
    IDE + "AvailableModels",
    IDE + "ServerTime",
    IDE + "GetDefaultModel",
    IDE + "GetDefaultModelNudgeData",
    ANALYTICS + "BootstrapStatsig",
    DASH + "GetTeams",
    DASH + "IsOnNewPricing",
    DASH + "GetTeamAdminSettingsOrEmptyIfNotInTeam",
)
# During a session, after the first turn.
SESSION = (
    AGENT + "NameAgent",
    AGENT + "UpdateConversationMetadata",
    AGENT + "GetNewChatNudgeParameterizedModelPicker",
    AGENT + "GetNewChatNudgeLegacyModelPicker",
    AGENT + "GetAllowedModelIntents",
    AGENT + "GetPromptContextUsage",
    ANALYTICS + "TrackEvents",
    ANALYTICS + "Batch",
    ANALYTICS + "SubmitLogs",
    AGENT + "UploadConversationBlobs",
    AGENT + "NotifyConversationClone",
)
TRANSPORTS = ("h2", "shim")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("surface") / "byok.db"


@pytest.fixture(scope="module")
def server(upstream: FakeUpstream, db: Path) -> Iterator[ServerProcess]:
    with server_process(brain_config(upstream.base_url, db=db), db.parent) as srv:
        yield srv


@contextlib.asynccontextmanager
async def client(server: ServerProcess, transport: str) -> AsyncIterator[httpx.AsyncClient]:
    """HTTP/2 with prior knowledge (as the CLI), or HTTP/1.1 (the IDE with HTTP/2 off)."""
    h2 = transport == "h2"
    async with httpx.AsyncClient(base_url=server.url, http1=not h2, http2=h2, timeout=30) as http:
        yield http


async def call(http: httpx.AsyncClient, path: str, request: Any = None) -> Any:
    body = b"" if request is None else request.SerializeToString()
    reply = await http.post(
        path,
        content=body,
        headers={"content-type": "application/proto", "connect-protocol-version": "1"},
    )
    assert reply.status_code == 200, (path, reply.status_code, reply.text)
    assert reply.headers["content-type"] == "application/proto", path
    return reply, decode(path, reply.content)


def git_workspace(tmp: Path) -> Path:
    """A real git repository, as the CLI finds one in its working directory."""
    folder = tmp / "workspace"
    folder.mkdir()
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / "README.md").write_text("a project\n")
    return folder


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_cli_start_up_in_a_git_workspace_is_answered(
    server: ServerProcess, transport: str, tmp_path: Path
) -> None:
    workspace = git_workspace(tmp_path)
    answers: dict[str, Any] = {}
    async with client(server, transport) as http:
        for path in CLI_STARTUP:
            reply, answers[path] = await call(http, path, request_type(path)())
            assert reply.http_version == ("HTTP/2" if transport == "h2" else "HTTP/1.1")
        again = (await call(http, CONFIG, request_type(CONFIG)()))[1]
    config = answers[CONFIG]
    key = config.indexing_config.default_user_path_encryption_key
    # The CLI derives a git workspace's path names from this key: present, one per server.
    assert len(base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))) == 32
    assert config.indexing_config.default_team_path_encryption_key == key
    assert again.indexing_config.default_user_path_encryption_key == key
    assert config.agent_url_config == b""  # unset: agent traffic stays on this server
    assert [m.model_id for m in answers[AGENT + "GetUsableModels"].models] == [
        "brain-1",
        "composer-test",
    ]
    assert answers[DASH + "GetMe"].auth_id == "cursor-byok|local"
    assert answers[DASH + "GetUserPrivacyMode"].privacy_mode == aiserver_pb2.PRIVACY_MODE_NO_STORAGE
    # Not in a team, no marketplace, no team repositories, no statsig gates.
    for path in (
        DASH + "GetTeamAdminSettingsOrEmptyIfNotInTeam",
        DASH + "ListMarketplaces",
        DASH + "GetTeamReposOrEmptyIfNotInTeam",
        DASH + "GetManagedSkills",
        DASH + "GetEffectiveUserPlugins",
        DASH + "GetTeams",
    ):
        assert answers[path].SerializeToString() == b"", path
    assert answers[ANALYTICS + "BootstrapStatsig"].config == "{}"
    # A first turn in that workspace, then every session RPC.
    cid = f"surface-{transport}"
    message = moded_request("hello from a git workspace", "agent", cid)
    message.run_request.action.user_message_action.request_context.env.workspace_paths[:] = [
        str(workspace)
    ]
    async with open_run(server, transport) as (send, reader):
        await send(message)
        assert await reader.wait_end() == {}, reader.kinds
    checkpoint_meter = meter_of(reader)
    async with client(server, transport) as http:
        for path in SESSION:
            request = request_type(path)()
            if path.endswith(("GetPromptContextUsage", "UpdateConversationMetadata")):
                request.conversation_id = cid
            if path.endswith("NameAgent"):
                request.user_message = (
                    "<system-reminder>be brief</system-reminder>\nFix the login bug"
                )
            _, answers[path] = await call(http, path, request)
    assert answers[AGENT + "NameAgent"].name == "Fix the login bug"
    usage = answers[AGENT + "GetPromptContextUsage"].snapshot.prompt_context_usage_tree
    nodes = {n.category_id: (n.estimated_tokens, n.character_count) for n in usage.nodes}
    # The same meter as the turn's checkpoint, from the latest call's record.
    assert nodes == {
        c.id: (c.estimated_tokens, c.character_count) for c in checkpoint_meter.breakdown.categories
    }
    assert usage.schema_version == 1 and sum(t for t, _ in nodes.values()) > 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_ide_start_up_is_answered(server: ServerProcess, transport: str) -> None:
    answers: dict[str, Any] = {}
    async with client(server, transport) as http:
        for path in IDE_STARTUP:
            _, answers[path] = await call(http, path, request_type(path)())
    assert list(answers[IDE + "AvailableModels"].model_names) == ["brain-1", "composer-test"]
    now_ms = time.time() * 1000
    assert abs(answers[IDE + "ServerTime"].receive_timestamp - now_ms) < 60_000
    assert answers[IDE + "GetDefaultModel"].model == "brain-1"
    nudge = answers[IDE + "GetDefaultModelNudgeData"]
    assert list(nudge.models_with_no_default_switch) == ["brain-1", "composer-test"]
    assert not nudge.should_default_switch_on_new_chat


async def test_the_context_usage_is_the_latest_calls_stored_meter(
    server: ServerProcess, db: Path
) -> None:
    cid = "surface-meter"
    for text in ("[usage 5000 0] a first question", "[usage 9100 0] a second question"):
        async with open_run(server, "h2") as (send, reader):
            await send(moded_request(text, "agent", cid))
            assert await reader.wait_end() == {}, reader.kinds
    async with client(server, "h2") as http:
        _, answer = await call(
            http,
            AGENT + "GetPromptContextUsage",
            request_type(AGENT + "GetPromptContextUsage")(conversation_id=cid),
        )
        _, none = await call(
            http,
            AGENT + "GetPromptContextUsage",
            request_type(AGENT + "GetPromptContextUsage")(conversation_id="never-seen"),
        )
    with db_reader(db) as conn:
        rows = conn.execute(
            "SELECT prompt_breakdown FROM llm_calls WHERE conversation_id = ? "
            "AND status = 'committed' ORDER BY created_at_ms DESC, call_id DESC",
            (cid,),
        ).fetchall()
    assert len(rows) == 2
    latest = records.decode_call_meter(bytes(rows[0][0])).meter
    first = records.decode_call_meter(bytes(rows[1][0])).meter
    tree = answer.snapshot.prompt_context_usage_tree
    assert [(n.category_id, n.estimated_tokens) for n in tree.nodes] == [
        (c.category.value, c.tokens) for c in latest.categories
    ]
    assert latest.used_tokens != first.used_tokens  # the latest, not the first
    assert not none.snapshot.HasField("prompt_context_usage_tree")  # nothing measured: empty


async def test_an_unknown_rpc_is_unimplemented_on_purpose(server: ServerProcess) -> None:
    async with client(server, "h2") as http:
        reply = await http.post(
            DASH + "GetCurrentPeriodUsage",
            content=b"",
            headers={"content-type": "application/proto"},
        )
    assert reply.status_code == 501 and reply.json()["code"] == "unimplemented"


def _counts(db: Path) -> dict[str, int]:
    with db_reader(db) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            ).fetchall()
        ]
        return {t: int(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]) for t in tables}


def _analytics(marker: bytes) -> dict[str, bytes]:
    """Analytics bodies carrying `marker` (as unknown fields: what a client's events hold)."""
    field = b"\x0a" + bytes([len(marker)]) + marker  # field 1, length-delimited
    return {
        ANALYTICS + "TrackEvents": field,
        ANALYTICS + "Batch": field,
        ANALYTICS + "SubmitLogs": field,
        ANALYTICS + "BootstrapStatsig": b"\x32" + bytes([len(marker)]) + marker,
        AGENT + "UploadConversationBlobs": b"\x0a" + bytes([len(marker)]) + marker,
        AGENT + "NotifyConversationClone": b"\x0a" + bytes([len(marker)]) + marker,
    }


async def test_analytics_are_accepted_and_dropped(upstream: FakeUpstream, tmp_path: Path) -> None:
    """Nothing written to the database, nothing logged above debug, the marker nowhere."""
    db = tmp_path / "byok.db"
    config = brain_config(upstream.base_url, db=db, extra='log_level = "debug"')
    marker = b"ANALYTICS-MARKER-7f3a9c"
    with server_process(config, tmp_path) as server:
        before = _counts(db)
        for transport in TRANSPORTS:
            async with client(server, transport) as http:
                for path, body in _analytics(marker).items():
                    for content_type in ("application/proto", "application/json"):
                        data = (
                            body
                            if content_type == "application/proto"
                            else b'{"events":[{"x":"ANALYTICS-MARKER-7f3a9c"}]}'
                        )
                        reply = await http.post(
                            path, content=data, headers={"content-type": content_type}
                        )
                        assert reply.status_code == 200, (path, reply.text)
                        if content_type == "application/proto":
                            decode(path, reply.content)
        after = _counts(db)
        log = server.log()
    assert after == before
    for file in db.parent.glob("byok.db*"):
        assert marker not in file.read_bytes(), file
    assert marker.decode() not in log
    loud = [
        line
        for line in log.splitlines()
        if re.search(r"Analytics|UploadConversationBlobs|NotifyConversationClone", line)
        and not re.search(r"\bDEBUG\b|\bdebug\b", line)
    ]
    assert loud == []
