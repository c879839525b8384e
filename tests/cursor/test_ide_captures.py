"""Real Cursor IDE run_request frames decode into the facts listed in the fixtures' INDEX.md.

The captures use field numbers newer than any published schema; these tests pin that our schema
names every one of them (no unknown fields left) and that re-encoding is byte-exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from cursor_byok.transport.cursor.context import PartKind
from cursor_byok.transport.cursor.decode import decode_run_request
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.paths import CURSOR_FIXTURES

FIXTURES = CURSOR_FIXTURES
WORKSPACE = "/Users/leokun/Documents/cursor-byok"
PROJECT = "/Users/leokun/.cursor/projects/Users-leokun-Documents-cursor-byok"


@dataclass(frozen=True)
class Expected:
    """One row of INDEX.md's per-file table, plus the per-file differences listed below it."""

    data_bytes: int
    request_id: str
    text: str
    message_id: str
    mode: int
    state_mode: int
    root_prompts: int
    turns: int
    used_tokens: int
    read_paths: int
    visible_file: str
    visible_line: int
    recently_viewed: int
    tool_tokens: int
    tool_chars: int


EXPECTED = {
    "agent": Expected(19434, "05484b4e-6423-4068-8d95-98d84d86f4a5", "你好agent",
                      "c77a2825-94ad-4b21-92df-6363abf4144b", 1, 7, 133, 40, 120469, 9,
                      "docs/抓包/mutitask.bidi.jsonl", 563, 10, 10480, 36825),
    "ask": Expected(19531, "d964678d-231f-4f72-a21b-5155b7990bd5", "你好ask",
                    "af6adcfa-ca20-4568-a32f-1846521695c4", 2, 1, 135, 41, 121902, 9,
                    "docs/抓包/agent.bidi.jsonl", 566, 10, 11433, 40174),
    "plan": Expected(19118, "7ba3b225-ff4e-4b1c-a8ee-5eb677717b67", "你好",
                     "f4a9aeaa-4f0b-40e1-abea-c082e42b6b2e", 3, 4, 129, 38, 116648, 9,
                     "docs/抓包/Ask-tag.md", 1, 9, 10480, 36825),
    "debug": Expected(17852, "af34957b-449a-4d63-ae1a-24562b61cfad",
                      "那么mark fix的 ui是什么唤起的？", "3903b578-5012-4ec0-ae73-8f949f0cdb52",
                      4, 4, 106, 36, 83256, 5, "prompt/debug/system_reminder_initial.txt", 24, 7,
                      10480, 36825),
    "multitask": Expected(19306, "ea2a15df-dfe8-4c78-8844-d99c5fbf3c1f", "你好123",
                          "ec4c65b4-5270-47e6-93e6-6d7f84793bea", 7, 3, 131, 39, 119559, 9,
                          "docs/抓包/plan.bidi.jsonl", 555, 10, 12145, 42675),
}  # fmt: skip


@dataclass(frozen=True)
class Capture:
    name: str
    raw: bytes
    request_id: str
    view: dict[str, Any]
    msg: a.AgentClientMessage


def _load(name: str) -> Capture:
    path = FIXTURES / f"ide-run-request-{name}.jsonl"
    record = json.loads(path.read_text(encoding="utf-8"))
    append = record["bidi_append_request"]
    raw = bytes.fromhex(append["data"])
    return Capture(
        name=name,
        raw=raw,
        request_id=append["request_id"]["request_id"],
        view=record["agent_client_message"],
        msg=a.AgentClientMessage.FromString(raw),
    )


@pytest.fixture(params=sorted(EXPECTED), scope="module")
def cap(request: pytest.FixtureRequest) -> Capture:
    return _load(request.param)


def _unknown_fields(msg: Message, path: str = "") -> list[tuple[str, int, int]]:
    """Every unknown field in the whole message tree, as (path, field number, wire type)."""
    found = [(path, f.field_number, f.wire_type) for f in UnknownFieldSet(msg)]
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        sub = f"{path}.{field.name}"
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    found += _unknown_fields(item, f"{sub}[{key!r}]")
        elif field.is_repeated:
            for i, item in enumerate(value):
                found += _unknown_fields(item, f"{sub}[{i}]")
        else:
            found += _unknown_fields(value, sub)
    return found


def test_all_five_captures_are_present() -> None:
    names = sorted(p.name for p in FIXTURES.glob("ide-run-request-*.jsonl"))
    assert names == sorted(f"ide-run-request-{n}.jsonl" for n in EXPECTED), FIXTURES


def test_reencodes_to_identical_bytes(cap: Capture) -> None:
    assert len(cap.raw) == EXPECTED[cap.name].data_bytes
    # Deterministic mode sorts map keys, which is the order the IDE used on the wire.
    assert cap.msg.SerializeToString(deterministic=True) == cap.raw


def test_no_unknown_fields_anywhere(cap: Capture) -> None:
    assert _unknown_fields(cap.msg) == []


def test_matches_capturers_decoded_view(cap: Capture) -> None:
    """The capturer decoded `data` with a newer schema; our names and values must agree."""
    ours = MessageToDict(cap.msg, preserving_proto_field_name=True)
    # Field 28 has no name in the capturer's schema; the view drops it. It is 1 in all five.
    assert ours["run_request"].pop("client_supports_routed_model_update") is True
    assert ours == cap.view


def test_run_request_envelope(cap: Capture) -> None:
    rr = cap.msg.run_request
    assert cap.msg.WhichOneof("message") == "run_request"
    assert rr.conversation_id == "7d302826-58c8-44df-bd26-9471bea65c4e"
    assert cap.request_id == EXPECTED[cap.name].request_id
    assert rr.run_id == cap.request_id
    assert not rr.HasField("model_details")
    assert rr.requested_model.model_id == "grok-4.6"
    params = [(p.id, p.value) for p in rr.requested_model.parameters]
    assert params == [("effort", "xhigh"), ("fast", "false")]
    assert rr.HasField("mcp_tools") and rr.mcp_tools.ByteSize() == 0
    assert [m.model_id for m in rr.selected_subagent_models] == [
        "default", "grok-4.6", "composer-2.5", "claude-opus-5", "gpt-5.6-sol", "grok-4.5",
    ]  # fmt: skip
    assert rr.HasField("suggest_next_prompt") and not rr.suggest_next_prompt
    assert rr.client_supports_inline_images is True
    assert rr.HasField("can_create_cloud_subagents") and not rr.can_create_cloud_subagents
    assert rr.HasField("suppress_subagent_progress_update_tool")
    assert not rr.suppress_subagent_progress_update_tool
    assert rr.client_supports_send_to_user is True
    assert rr.client_supports_prompt_context_usage_rpc is True
    assert rr.client_supports_routed_model_update is True


def test_conversation_state(cap: Capture) -> None:
    exp = EXPECTED[cap.name]
    cs = cap.msg.run_request.conversation_state
    assert len(cs.root_prompt_messages_json) == exp.root_prompts
    assert len(cs.turns) == exp.turns
    assert all(len(b) == 32 for b in [*cs.root_prompt_messages_json, *cs.turns])
    assert cs.mode == exp.state_mode
    assert cs.token_details.max_tokens == 256000
    assert cs.token_details.used_tokens == exp.used_tokens
    breakdown = cs.token_details.breakdown
    assert (breakdown.total_used_tokens, breakdown.max_tokens) == (exp.used_tokens, 256000)
    tools = next(c for c in breakdown.categories if c.label == "Tool definitions")
    assert (tools.estimated_tokens, tools.character_count) == (exp.tool_tokens, exp.tool_chars)
    assert list(cs.previous_workspace_uris) == [f"file://{WORKSPACE}"]
    assert len(cs.read_paths) == exp.read_paths
    assert len(cs.subagent_states) == 2
    for state in cs.subagent_states.values():
        assert state.subagent_type.WhichOneof("type") == "explore"
        assert state.model_id == "cursor-grok-4.5-high"
    assert [(t.repo_path, t.branch_name) for t in cs.tracked_git_repo_branches] == [
        (WORKSPACE, "refactor/0.1.0-beta")
    ]
    assert cs.agent_type == "ide"
    assert cs.conversation_started_timestamp_ms == 1786888555033
    assert cs.conversation_started_time_zone == "Asia/Shanghai"
    assert len(cs.subagent_runs_by_parent_tool_call_id) == 3
    for key, run in cs.subagent_runs_by_parent_tool_call_id.items():
        assert run.parent_tool_call_id == key
        assert run.status == a.SUBAGENT_RUN_STATUS_SUCCESS
        assert run.completion_reason == a.BACKGROUND_TASK_COMPLETION_REASON_TASK_FINISHED
        assert run.subagent_id in cs.subagent_states


def test_user_message(cap: Capture) -> None:
    exp = EXPECTED[cap.name]
    action = cap.msg.run_request.action
    assert action.WhichOneof("action") == "user_message_action"
    uma = action.user_message_action
    assert [f.name for f, _ in uma.ListFields()] == ["user_message"]
    assert not uma.HasField("request_context")
    um = uma.user_message
    assert (um.text, um.message_id, um.mode) == (exp.text, exp.message_id, exp.mode)
    assert "root" in json.loads(um.rich_text)
    sc = um.selected_context
    assert [f.name for f, _ in sc.ListFields()] == ["invocation_context"]
    ide = sc.invocation_context.ide_state
    assert sc.invocation_context.WhichOneof("data") == "ide_state"
    assert len(ide.visible_files) == 1
    visible = ide.visible_files[0]
    assert visible.relative_path == exp.visible_file
    assert visible.path == f"{WORKSPACE}/{exp.visible_file}"
    assert visible.HasField("cursor_position")
    assert visible.cursor_position.line == exp.visible_line
    assert len(ide.recently_viewed_files) == exp.recently_viewed


def test_request_context_parts(cap: Capture) -> None:
    parts = cap.msg.run_request.action.request_context_parts
    lengths = (
        parts.rules_byte_length,
        parts.skills_byte_length,
        parts.subagents_byte_length,
        parts.mcps_byte_length,
    )
    assert lengths == (1114, 5221, 159, 28434)
    ids = (parts.rules_blob_id, parts.skills_blob_id, parts.subagents_blob_id, parts.mcps_blob_id)
    assert all(len(i) == 32 for i in ids) and len(set(ids)) == 4

    ctx = parts.dynamic_context
    assert len(ctx.rules) == 0 and len(ctx.tools) == 0
    assert len(ctx.project_layouts) == 0 and len(ctx.mcp_instructions) == 0
    assert len(ctx.file_contents) == 0
    env = ctx.env
    assert (env.os_version, env.shell, env.time_zone) == ("darwin 25.5.0", "zsh", "Asia/Shanghai")
    assert list(env.workspace_paths) == [WORKSPACE]
    assert env.terminals_folder == f"{PROJECT}/terminals"
    assert env.project_folder == PROJECT
    assert env.agent_transcripts_folder.startswith(f"{PROJECT}/agent-transcripts")
    assert env.sandbox_supported and env.sandbox_network_has_defaults
    assert env.HasField("computer_use_supported") and not env.computer_use_supported
    assert env.HasField("is_working_dir_home_dir") and not env.is_working_dir_home_dir
    assert env.smart_mode_classifier_auto_mode_enabled is True

    assert len(ctx.git_repos) == 1
    repo = ctx.git_repos[0]
    assert (repo.path, repo.branch_name) == (WORKSPACE, "refactor/0.1.0-beta")
    assert repo.remote_url == "git@github.com:leookun/cursor-byok.git"
    assert len(repo.status) > 1000
    assert repo.HasField("is_origin_backed") and not repo.is_origin_backed

    assert ctx.web_search_enabled is True and ctx.web_fetch_enabled is True
    assert (ctx.commit_attribution_message, ctx.pr_attribution_message) == ("enabled", "enabled")
    assert list(ctx.hooks_config.configured_steps) == [
        "stop", "beforeSubmitPrompt", "sessionStart", "subagentStop", "preToolUse", "postToolUse",
    ]  # fmt: skip
    complete = [
        "supports_mcp_auth", "git_repo_info_complete", "read_lints_enabled", "mcp_info_complete",
        "rules_info_complete", "env_info_complete", "repository_info_complete",
        "custom_subagents_info_complete", "agent_skills_info_complete",
        "mcp_file_system_info_complete", "git_status_info_complete",
    ]  # fmt: skip
    assert all(getattr(ctx, name) is True for name in complete)
    assert ctx.HasField("search_conversations_enabled") and not ctx.search_conversations_enabled


def test_debug_mode_config_only_in_debug_frame(cap: Capture) -> None:
    ctx = cap.msg.run_request.action.request_context_parts.dynamic_context
    assert ctx.HasField("debug_mode_config") == (cap.name == "debug")
    if cap.name == "debug":
        cfg = ctx.debug_mode_config
        assert cfg.log_path == f"{WORKSPACE}/.cursor/debug-7d3028.log"
        assert cfg.server_endpoint == (
            "http://127.0.0.1:7578/ingest/cfb18c16-5f53-419c-8f4f-eeba675c8f89"
        )
        assert cfg.session_id == "7d3028"


def test_the_terminals_folder_reaches_the_turn_context(cap: Capture) -> None:
    """AwaitShell reads background shells' output under the folder the IDE names."""
    request = decode_run_request(cap.msg.run_request)
    assert request.inline_context is not None and request.inline_context.environment
    assert request.inline_context.environment.terminals_folder == f"{PROJECT}/terminals"


def test_the_context_parts_decode_to_typed_references(cap: Capture) -> None:
    """ref_only (reference §4): the run request names four typed blobs, its dynamic context has
    no rules and no tools, and `mcp_tools` is empty. The captures hold no blob bytes, so what
    the parts contain is not in them (tests/e2e/test_context_parts.py sends such blobs)."""
    request = decode_run_request(cap.msg.run_request)
    assert [(r.kind, r.byte_length) for r in request.context_refs] == [
        (PartKind.RULES, 1114),
        (PartKind.SKILLS, 5221),
        (PartKind.SUBAGENTS, 159),
        (PartKind.MCPS, 28434),
    ]
    parts = cap.msg.run_request.action.request_context_parts
    assert [r.blob_id for r in request.context_refs] == [
        parts.rules_blob_id,
        parts.skills_blob_id,
        parts.subagents_blob_id,
        parts.mcps_blob_id,
    ]
    inline = request.inline_context
    assert inline is not None
    assert inline.rules == () and inline.tools == () and inline.mcp_meta is None
    assert request.mcp_tools == ()
    assert cap.msg.run_request.HasField("mcp_tools")  # present, but an empty message
