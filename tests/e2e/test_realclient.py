"""The real third-party client (oh-my-pi's Cursor provider, over HTTP/2) against our server,
which answers from a scripted OpenAI-compatible upstream over real loopback HTTP."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from cursor_byok.loop.catalogue import Mode, offered
from tests.e2e.conftest import drive
from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream

pytestmark = pytest.mark.realclient


def deltas(output: str, kind: str) -> str:
    out = []
    for line in output.splitlines():
        prefix = f"[event] {kind} "
        if line.startswith(prefix):
            _, _, payload = line[len(prefix) :].partition(" ")
            out.append(json.loads(payload))
    return "".join(out)


def last_chat_request(upstream: FakeUpstream) -> dict:  # type: ignore[type-arg]
    return json.loads(upstream.requests[-1].body)


def test_text_turn(realclient: Path, server: ServerProcess, upstream: FakeUpstream) -> None:
    r = drive(realclient, server.url, "--prompt", "hello there", "--model", "brain-1")
    assert r.returncode == 0, r.stdout + r.stderr + server.log()
    assert r.stdout.strip().endswith("DRIVE OK")
    assert deltas(r.stdout, "text_delta") == "You said: hello there"
    body = last_chat_request(upstream)
    assert body["model"] == "brain-1" and body["stream"] is True
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][-1] == {"role": "user", "content": "hello there"}


def test_thinking_turn(realclient: Path, server: ServerProcess) -> None:
    r = drive(realclient, server.url, "--prompt", "[think] why", "--model", "brain-1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert deltas(r.stdout, "thinking_delta") == "Let me reason step by step."
    assert deltas(r.stdout, "text_delta") == "I thought about it."


def test_two_turn_conversation(
    realclient: Path, server: ServerProcess, upstream: FakeUpstream
) -> None:
    r = drive(
        realclient,
        server.url,
        "--prompt",
        "first question",
        "--followup",
        "second question",
        "--model",
        "brain-1",
    )
    assert r.returncode == 0, r.stdout + r.stderr + server.log()
    assert r.stdout.count("[event] done") == 2
    body = last_chat_request(upstream)
    roles = [(m["role"], m.get("content")) for m in body["messages"][1:]]
    assert roles == [
        ("user", "first question"),
        ("assistant", "You said: first question"),
        ("user", "second question"),
    ]


def test_mcp_tool_executed_on_the_client(
    realclient: Path, server: ServerProcess, upstream: FakeUpstream
) -> None:
    prompt = '[tool get_weather {"city": "Paris"}]'
    r = drive(realclient, server.url, "--prompt", prompt, "--tool", "--exec", "--model", "brain-1")
    assert r.returncode == 0, r.stdout + r.stderr + server.log()
    assert "[exec] mcp get_weather" in r.stdout
    assert deltas(r.stdout, "text_delta").endswith("The tool said: Sunny, 21C in Paris")
    body = last_chat_request(upstream)
    tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
    assert tool_msgs and "Sunny, 21C in Paris" in tool_msgs[-1]["content"]
    names = [t["function"]["name"] for t in body["tools"]]
    assert "get_weather" in names and "Shell" in names


@pytest.mark.parametrize("script", ["write-read", "write-shell"])
def test_omp_agent_writes_then_reads_on_the_client(
    realclient: Path, server: ServerProcess, tmp_path: Path, script: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    token = f"payload-{script}"
    prompt = f"[script {script} notes.txt {token}]"
    proc = subprocess.run(
        [str(realclient / "omp-run.sh"), server.url, prompt],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "OMP_MODEL": "cursor/brain-1", "OMP_MODE": "text"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + server.log()[-3000:]
    assert (work / "notes.txt").read_text() == token
    assert "The file says:" in proc.stdout and token in proc.stdout


def test_omp_runs_a_shell_with_block_until_ms_to_completion(
    realclient: Path, server: ServerProcess, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """oh-my-pi never backgrounds and reads ShellArgs.timeout as seconds: a Shell sent with
    Cursor's background behaviour still runs to its end on the client, and the turn ends."""
    work = tmp_path / "work"
    work.mkdir()
    args = {
        "command": "sleep 1 && printf shell-made > made-by-shell.txt && echo done-writing",
        "block_until_ms": 500,
        "description": "Write a marker file",
    }
    prompt = f"[tool Shell {json.dumps(args)}]"
    proc = subprocess.run(
        [str(realclient / "omp-run.sh"), server.url, prompt],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "OMP_MODEL": "cursor/brain-1", "OMP_MODE": "text"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + server.log()[-3000:]
    assert (work / "made-by-shell.txt").read_text() == "shell-made"
    assert "The tool said: Exit code: 0" in proc.stdout and "done-writing" in proc.stdout
    bodies = [json.loads(r.body) for r in upstream.requests]
    after = [b for b in bodies if any(m["role"] == "tool" for m in b["messages"])][-1]
    tool = [m for m in after["messages"] if m["role"] == "tool"][-1]
    # It ran past its block time (0.5 s) to the end: the client adds its wall time (>= 1 s).
    assert tool["content"].startswith("Exit code: 0\nstdout:\ndone-writing\n")
    wall = re.search(r"Wall time: ([0-9.]+) seconds", tool["content"])
    assert wall is not None and float(wall[1]) >= 1.0, tool["content"]


def test_omp_todo_write_is_answered_by_the_server(
    realclient: Path, server: ServerProcess, upstream: FakeUpstream
) -> None:
    # The brain's pattern ends at the first "}]": the array closes with " ]".
    prompt = (
        '[tool TodoWrite {"merge": false, "todos": [{"id": "a", "content": "plan", '
        '"status": "in_progress"}, {"id": "b", "content": "do", "status": "pending"} ]}]'
    )
    r = drive(realclient, server.url, "--prompt", prompt, "--tool", "--exec", "--model", "brain-1")
    assert r.returncode == 0, r.stdout + r.stderr + server.log()
    assert "[exec]" not in r.stdout  # nothing ran on the client
    text = "The todo list was replaced; it now has 2 item(s):\n- [in_progress] a: plan"
    assert deltas(r.stdout, "text_delta").startswith("Let me check.The tool said: " + text)
    body = last_chat_request(upstream)
    tool_msgs = [m for m in body["messages"] if m["role"] == "tool"]
    assert tool_msgs[-1]["content"] == text + "\n- [pending] b: do"


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        (
            "AskQuestion",
            '{"questions": [{"id": "db", "prompt": "Which?", "options": '
            '[{"id": "a", "label": "A"}, {"id": "b", "label": "B"} ] } ] }',
            "The user declined to answer the question(s): Interactive questions are not "
            "implemented by this client",
        ),
        (
            "SwitchMode",
            '{"target_mode_id": "plan"}',
            "The user declined switching to plan mode: Mode switches are not implemented by "
            "this client. Stay in agent mode.",
        ),
        # This client has no modes (it never sets UserMessage.mode), so it is always in agent
        # mode, where CreatePlan is not offered: a model that calls it anyway reads why. (Its
        # own answer to create_plan_request_query, an error, never comes into play.)
        (
            "CreatePlan",
            '{"plan": "# Plan"}',
            "Error: CreatePlan is not offered in agent mode (only in plan mode). Available "
            "tools: " + ", ".join(offered(Mode.AGENT)) + ", get_weather.",
        ),
    ],
)
def test_omp_rejects_a_query_tool_and_the_turn_ends_normally(
    realclient: Path,
    server: ServerProcess,
    upstream: FakeUpstream,
    name: str,
    args: str,
    expected: str,
) -> None:
    """oh-my-pi answers AskQuestion and SwitchMode queries with a rejection: the model reads
    it as the tool's result and the turn ends with its answer (issue 14, point 9)."""
    prompt = f"[tool {name} {args}]"
    r = drive(realclient, server.url, "--prompt", prompt, "--tool", "--exec", "--model", "brain-1")
    assert r.returncode == 0, r.stdout + r.stderr + server.log()
    assert r.stdout.strip().endswith("DRIVE OK")
    body = last_chat_request(upstream)
    (tool,) = [m for m in body["messages"] if m["role"] == "tool"]
    assert tool["content"] == expected
    # The scripted model repeats the result (cut when long) as its answer.
    said = deltas(r.stdout, "text_delta").split("The tool said: ", 1)[1]
    assert expected.startswith(said) and len(said) >= min(len(expected), 150)


def test_omp_task_call_ends_the_turn_normally(
    realclient: Path, server: ServerProcess, upstream: FakeUpstream
) -> None:
    """A model that calls Task against a client that runs no helpers (oh-my-pi): whatever the
    client answers the subagent_args exec with, the model reads a result and the turn ends
    (issue 17)."""
    prompt = '[tool Task {"description": "Scan the code", "prompt": "Find the parser."}]'
    r = drive(realclient, server.url, "--prompt", prompt, "--tool", "--exec", "--model", "brain-1")
    assert r.returncode == 0, r.stdout + r.stderr + server.log()
    assert r.stdout.strip().endswith("DRIVE OK")
    body = last_chat_request(upstream)
    (tool,) = [m for m in body["messages"] if m["role"] == "tool"]
    assert tool["content"]
    said = deltas(r.stdout, "text_delta").split("The tool said: ", 1)[1]
    assert tool["content"].startswith(said[:40])
