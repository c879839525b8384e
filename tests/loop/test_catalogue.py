"""The tool catalogue per mode (loop/catalogue.py): docs/tools.md mirrors it exactly, each mode
offers its built tools in catalogue order, gates switch tools off, ask mode refuses the calls
that would change the workspace, and every model call names the catalogue version."""

from __future__ import annotations

import hashlib
import re

import msgspec
import pytest

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import ToolDefinition, ToolResultMessage
from cursor_byok.loop import (
    CallClient,
    CallLLM,
    RuntimeState,
    TurnContext,
    build_tools,
    transition,
)
from cursor_byok.loop import catalogue as cat
from cursor_byok.loop.tools import NATIVE_BY_NAME, NATIVE_TOOLS
from tests.loop.loop_helpers import start, stream, tool_call
from tests.paths import REPO

DOC = REPO / "docs" / "tools.md"


def documented() -> tuple[list[dict[str, object]], list[str]]:
    """The rows of docs/tools.md's catalogue table and its mode columns."""
    text = DOC.read_text()
    block = text.split("<!-- catalogue:begin -->")[1].split("<!-- catalogue:end -->")[0]
    lines = [ln for ln in block.strip().splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    modes = header[4:]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append(
            {
                "name": cells[0],
                "issue": int(cells[1]),
                "status": cells[2],
                "gates": tuple(re.findall(r"`([^`]+)`", cells[3])),
                "modes": {m for m, mark in zip(modes, cells[4:], strict=True) if mark == "✓"},
            }
        )
    return rows, modes


def test_docs_table_equals_the_code_table() -> None:
    rows, modes = documented()
    assert modes == [m.value for m in cat.Mode]
    assert [r["name"] for r in rows] == [t.name for t in cat.TOOLS]
    for row, tool in zip(rows, cat.TOOLS, strict=True):
        assert row["issue"] == tool.issue, tool.name
        assert row["status"] == tool.status.value, tool.name
        assert row["gates"] == tuple(g.value for g in tool.gates), tool.name
        assert row["modes"] == {m.value for m in cat.Mode if tool.name in cat.MODES[m]}, tool.name
    assert f"Catalogue version:\n**{cat.CATALOGUE_VERSION}**" in DOC.read_text()


def _open(name: str, switches: cat.Switches) -> bool:
    return all(cat.gate_open(g, name, switches) for g in cat.TOOLS_BY_NAME[name].gates)


@pytest.mark.parametrize("meta", [False, True], ids=["flat-mcp", "mcp-meta"])
@pytest.mark.parametrize("mode", list(cat.Mode))
def test_each_mode_offers_its_documented_built_tools_in_order(mode: cat.Mode, meta: bool) -> None:
    """The built tools of the documented row set whose gates are open: the MCP meta-tools
    only when the client asked for them."""
    switches = cat.Switches(mcp_meta_tools=True) if meta else cat.DEFAULT_SWITCHES
    rows, _ = documented()
    expected = [
        r["name"]
        for r in rows
        if mode.value in r["modes"] and r["status"] == "built" and _open(r["name"], switches)
    ]
    context = TurnContext(mode=mode.value, switches=switches)
    names = [t.name for t in build_tools(None, started(context).committed)]
    assert names == expected == list(cat.offered(mode, switches))
    meta_tools = {"GetMcpTools", "CallMcpTool", "FetchMcpResource", "ListMcpResources"}
    assert bool(meta_tools & set(names)) is meta


def test_every_mode_lists_known_tools_in_catalogue_order() -> None:
    order = [t.name for t in cat.TOOLS]
    for mode, names in cat.MODES.items():
        assert list(names) == [n for n in order if n in names], mode
        assert len(set(names)) == len(names), mode


def test_built_means_a_native_tool_exists_and_nothing_else_is_offered() -> None:
    built = {t.name for t in cat.TOOLS if t.status is cat.Status.BUILT}
    assert built == {t.name for t in NATIVE_TOOLS} == set(NATIVE_BY_NAME)
    for mode in cat.Mode:
        assert set(cat.offered(mode)) <= built


def test_reference_counts_and_our_choices() -> None:
    ours = {"LS", "WriteShellStdin", "ListMcpResources"}
    # cursor-native-tools.md §1: agent 20, plan 13, debug 15, multitask 17, subagent 20.
    counts = {m: len(set(cat.MODES[m]) - ours) for m in cat.Mode}
    assert counts == {
        cat.Mode.AGENT: 20,
        cat.Mode.ASK: 18,  # [U]: GoL's 19 counts its own extra tools; ours are excluded here
        cat.Mode.PLAN: 13,
        cat.Mode.DEBUG: 15,
        cat.Mode.MULTITASK: 17,
        cat.Mode.SUBAGENT: 20,
    }
    assert set(cat.MODES[cat.Mode.AGENT]) - set(cat.MODES[cat.Mode.ASK]) == {
        "SwitchMode",
        "GenerateImage",
    }


def test_gates() -> None:
    s = cat.Switches()
    assert not cat.gate_open(cat.Gate.WEB_SEARCH_ENABLED, "WebSearch", s)
    assert cat.gate_open(
        cat.Gate.WEB_SEARCH_ENABLED, "WebSearch", cat.Switches(web_search_enabled=True)
    )
    assert not cat.gate_open(cat.Gate.WEB_FETCH_ENABLED, "WebFetch", s)
    assert cat.gate_open(cat.Gate.READ_LINTS_ENABLED, "ReadLints", s)
    assert not cat.gate_open(
        cat.Gate.READ_LINTS_ENABLED, "ReadLints", cat.Switches(read_lints_enabled=False)
    )
    gate = cat.Gate.SUPPRESS_SUBAGENT_PROGRESS_UPDATE_TOOL
    assert cat.gate_open(gate, "UpdateCurrentStep", s)
    assert not cat.gate_open(
        gate, "UpdateCurrentStep", cat.Switches(suppress_subagent_progress_update_tool=True)
    )
    assert not cat.gate_open(cat.Gate.MCP_META_TOOLS, "CallMcpTool", s)
    # WebSearch: the client's flag and a configured backend, both.
    assert "WebSearch" not in cat.offered(cat.Mode.AGENT, cat.Switches(web_search_enabled=True))
    assert "WebSearch" not in cat.offered(cat.Mode.AGENT, cat.Switches(web_search_configured=True))
    both = cat.Switches(web_search_enabled=True, web_search_configured=True)
    assert "WebSearch" in cat.offered(cat.Mode.AGENT, both)
    assert "WebSearch" in cat.offered(cat.Mode.PLAN, both)
    off = cat.Switches(disabled_tools=("Shell",))
    assert "Shell" not in cat.offered(cat.Mode.AGENT, off)
    assert cat.offered(cat.Mode.AGENT, off) == cat.offered(cat.Mode.AGENT)[1:]


def test_unknown_modes_offer_agent_tools() -> None:
    for name in ("triage", "custom", "mode_42", ""):
        assert cat.mode_of(name) is cat.Mode.AGENT


# -- the loop with the catalogue ---------------------------------------------------------------

MCP = (ToolDefinition(name="lookup", description="l", parameters={"type": "object"}),)


def started(context: TurnContext) -> RuntimeState:
    return transition(RuntimeState.new("c"), start("hi", context)).state


@pytest.mark.parametrize("mode", ["ask", "plan"])
def test_mcp_tools_are_offered_in_ask_and_plan(mode: str) -> None:
    names = [
        t.name for t in build_tools(None, started(TurnContext(mode=mode, mcp_tools=MCP)).committed)
    ]
    assert names[-1] == "lookup"


@pytest.mark.parametrize("tool", sorted(cat.REFUSED[cat.Mode.ASK]))
def test_ask_mode_refuses_a_workspace_change_without_calling_the_client(tool: str) -> None:
    s = started(TurnContext(mode="ask"))
    ts, _ = stream(s, FauxResponse.tool_calls([tool_call("a", tool, path="x", command="rm x")]))
    t = ts[-1]
    assert isinstance(t.command, CallLLM)  # answered here: the model is called again
    answer = t.state.committed.messages[-1]
    assert isinstance(answer, ToolResultMessage) and answer.is_error
    assert answer.text.startswith(f"Error: {tool} is not allowed in ask mode")
    assert [r.call.name for r in t.local_results] == [tool]  # the IDE still gets its card


@pytest.mark.parametrize("mode", ["agent", "plan", "debug"])
def test_other_modes_send_shell_to_the_client(mode: str) -> None:
    s = started(TurnContext(mode=mode))
    ts, _ = stream(s, FauxResponse.tool_calls([tool_call("a", "Shell", command="ls")]))
    assert isinstance(ts[-1].command, CallClient)


def test_every_model_call_names_the_catalogue_version() -> None:
    t = transition(RuntimeState.new("c"), start("hi", TurnContext()))
    assert isinstance(t.command, CallLLM)
    assert t.command.catalogue_version == cat.CATALOGUE_VERSION


# The catalogue's content per version: a change to any tool's name, description or parameters,
# to a mode's list or to a status or gate must come with a new CATALOGUE_VERSION (and its digest
# pinned here), or an operator could not tell a catalogue change from a cache bug.
PINNED_DIGESTS = {
    7: "82eb73825af64a273ccb479c9d4f73592e1bfea0fca3495c72a372c2dd619c40",
    8: "51b79bbe65d34e701b59efc178a9e0a7ed4ebccc3e8ae6f0110e73c320dd286c",
    9: "cc0b98846b511ea602e2017dd022169aa6a62a9d2320ee6c8732fc993c756dec",
    10: "a6d56d52029a6451728222fd6805d5febd0cbe01d4bf8eb93877ecdcd575958a",
    11: "3fd6237d315c6031b7b7ad88ab9d941ebff034afd7236c4122cfa3b473802c69",
    12: "964a019df8b3f69b81538ae97331ab790f5003fef66a0e9e65557944c68af654",
}


def catalogue_digest() -> str:
    doc = {
        "definitions": [t.definition for t in NATIVE_TOOLS],
        "tools": list(cat.TOOLS),
        "modes": {m.value: list(names) for m, names in cat.MODES.items()},
    }
    return hashlib.sha256(msgspec.json.encode(doc, order="sorted")).hexdigest()


def test_the_version_moves_with_the_catalogue() -> None:
    digest = catalogue_digest()
    assert PINNED_DIGESTS.get(cat.CATALOGUE_VERSION) == digest, (
        f"the catalogue changed: bump CATALOGUE_VERSION and pin {digest!r} for it"
    )
    assert len(set(PINNED_DIGESTS.values())) == len(PINNED_DIGESTS)  # each version its own


@pytest.mark.parametrize(
    ("name", "mode", "why"),
    [
        ("CreatePlan", "agent", "CreatePlan is not offered in agent mode (only in plan mode)."),
        ("SwitchMode", "ask", "SwitchMode is not offered in ask mode (only in agent, multitask"),
        (
            "UpdateCurrentStep",
            "agent",
            "UpdateCurrentStep is not offered in agent mode (only in subagent mode).",
        ),
        ("Teleport", "agent", "unknown tool 'Teleport'."),
        ("Shell", "agent", "Shell is switched off for this conversation."),
        ("CreatePlan", "triage", "CreatePlan is not offered in agent mode"),
    ],
)
def test_a_call_to_a_tool_not_offered_says_why(name: str, mode: str, why: str) -> None:
    from cursor_byok.llm.types import ToolCall
    from cursor_byok.loop.results import synthetic_result

    result = synthetic_result(ToolCall(id="c1", name=name, arguments={}), ("Read", "LS"), mode=mode)
    assert result is not None and result.is_error
    assert result.text.startswith(f"Error: {why}")
    assert result.text.endswith("Available tools: Read, LS.")


def test_an_opt_in_tool_is_offered_only_when_the_operator_names_it() -> None:
    assert "WriteShellStdin" not in cat.offered(cat.Mode.AGENT)
    on = cat.Switches(enabled_tools=("WriteShellStdin",))
    agent = cat.offered(cat.Mode.AGENT, on)
    assert agent.index("WriteShellStdin") == agent.index("AwaitShell") + 1
    assert "WriteShellStdin" in cat.offered(cat.Mode.SUBAGENT, on)
    assert "WriteShellStdin" not in cat.offered(cat.Mode.PLAN, on)  # not in plan's list
    both = cat.Switches(enabled_tools=("WriteShellStdin",), disabled_tools=("WriteShellStdin",))
    assert "WriteShellStdin" not in cat.offered(cat.Mode.AGENT, both)  # disabled wins
