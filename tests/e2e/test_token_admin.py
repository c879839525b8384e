"""Running a team's tokens (issue 25, points 4 to 7) through the real `cursor-byok` command (a
child process each time) and real server processes, on SQLite and on a real PostgreSQL:
the access mode that revoking the last token never flips, a revoked token's run ending at
once instead of waiting on its tool, every database command on both backends, relative paths
read beside the configuration, and `token add`'s mistakes in one line each."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.access_tokens import REFRESH_S
from cursor_byok.store.api import LLMCallRecord
from cursor_byok.store.sqlite import SQLiteStore
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    chat_requests,
    exec_of,
    http,
    read_ok,
    run_request,
    unique,
)
from tests.e2e.test_tokens import refused, shim_turn
from tests.paths import REPO
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream

# How long a change made by the CLI may take to reach a running server: the directory's
# refresh, plus the time a loaded 2-core machine takes to run the command and the probes.
BOUND_S = REFRESH_S + 4.0
PROBE = "/aiserver.v1.ServerConfigService/GetServerConfig"  # a unary call that changes nothing
# Output priced, input free: "You said: bob on the server" is 6 completion tokens (27
# characters / 4): at $20.50 per million output tokens, $0.000123. Each call reserves its
# output cap, 12 tokens ($0.000246), of a budget until it settles (reservations.py).
CHEAP_OUTPUT_PRICE = 20.5
OUTPUT_CAP = 12


def config_text(
    upstream: FakeUpstream, database: str, *, prices: bool = True, extra: str = ""
) -> str:
    priced = f'\n[models."brain-1".prices]\noutput = {CHEAP_OUTPUT_PRICE}\n' if prices else ""
    return f"""
[server]
database = "{database}"
{extra}

[providers.brain]
api = "openai-chat"
base_url = "{upstream.base_url}/v1"
local = false  # on loopback, but standing in for a provider that bills: no $0 default

[models."brain-1"]
provider = "brain"
model = "brain-1"
max_output_tokens = {OUTPUT_CAP}
{priced}
[models."composer-test"]
provider = "brain"
model = "brain-1"
aliases = ["composer"]
"""


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a child: nothing of the real user's configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CURSOR_BYOK_", "PG"))}
    env.pop("XDG_CONFIG_HOME", None)
    return {**env, "HOME": str(home), **extra}


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """`cursor-byok ARGS` in a child process."""
    cmd = [sys.executable, "-m", "cursor_byok", *args]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=env or clean_env(cwd),
    )


def token(config: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return cli("token", *args, "--config", str(config), cwd=cwd or config.parent)


def added(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    secret = done.stdout.strip()
    assert secret.startswith("cbk_") and secret not in done.stderr
    return secret


def status(server: ServerProcess, secret: str | None = None) -> int:
    """The HTTP status of a call that needs authentication (200 or 401)."""
    headers = {"content-type": "application/proto", **cc.auth_headers(secret)}
    r = httpx.post(server.url + PROBE, content=b"", headers=headers, timeout=10)
    return r.status_code


def until(servers: list[ServerProcess], want: int, secret: str | None = None) -> list[float]:
    """Wait until every server answers `want`; the seconds each took (at most BOUND_S)."""
    t0 = time.monotonic()
    took: dict[int, float] = {}
    while len(took) < len(servers):
        for i, server in enumerate(servers):
            if i not in took and status(server, secret) == want:
                took[i] = time.monotonic() - t0
        if len(took) < len(servers):
            assert time.monotonic() - t0 < BOUND_S, (want, took)
            time.sleep(0.05)
    return [round(took[i], 2) for i in range(len(servers))]


def documented_json() -> dict[str, Any]:
    text = (REPO / "docs" / "operations.md").read_text()
    tokens = text[text.index("## Tokens per person") :]
    (block,) = re.findall(r"```json\n(.*?)```", tokens[: tokens.index("\n## ")], flags=re.S)
    found: dict[str, Any] = json.loads(block)
    return found


def code_of(end: dict[str, Any]) -> str | None:
    error = end.get("error")
    return str(error["code"]) if isinstance(error, dict) else None


def holds(
    servers: list[ServerProcess], want: int, seconds: float, secret: str | None = None
) -> None:
    """Every server keeps answering `want` for `seconds` (past a refresh or two)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for server in servers:
            assert status(server, secret) == want
        time.sleep(0.1)


# -- point 5: the access mode ----------------------------------------------------------------


def test_revoking_the_last_token_keeps_both_servers_closed(
    upstream: FakeUpstream, shared_database: str, tmp_path: Path
) -> None:
    """Two server processes on one database (SQLite file, PostgreSQL): the first token closes
    both; revoking it keeps them closed, its own value refused too; `token open` and `token
    close` reach both, without a restart, within BOUND_S."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    text = config_text(upstream, shared_database)
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    with (
        server_process(text, tmp_path / "a") as first,
        server_process(text, tmp_path / "b") as second,
    ):
        both = [first, second]
        assert [status(s) for s in both] == [200, 200]  # loopback, no token ever: open
        erin = added(token(config, "add", "erin"))
        print("closed by the first token after (s):", until(both, 401))
        assert [status(s, erin) for s in both] == [200, 200]
        revoke = token(config, "revoke", "erin")
        assert revoke.returncode == 0, revoke.stderr
        assert "access: closed" in revoke.stderr
        until(both, 401, erin)  # the revoked value is refused...
        holds(both, 401, 3 * REFRESH_S)  # ...and the server stays closed to everyone
        holds(both, 401, 0.5, erin)
        listing = token(config, "list", "--json")
        assert json.loads(listing.stdout)["access"] == "closed"
        opened = token(config, "open")
        assert opened.returncode == 0 and opened.stdout == ""
        assert "access open: requests without a token are let in" in opened.stderr
        print("opened after (s):", until(both, 200))
        assert "access open (as cursor-byok token open|close set it" in first.log()
        closed = token(config, "close")
        assert closed.returncode == 0 and "access closed" in closed.stderr
        assert "no token is active" in closed.stderr  # and no auth_token: nobody gets in
        print("closed again after (s):", until(both, 401))
        assert "access closed (as cursor-byok token open|close set it" in second.log()


# -- point 4 (revocation): a run waiting on a tool ends at its next model call ---------------


async def test_revoked_while_its_run_waits_on_a_tool_the_run_ends_at_once(
    upstream: FakeUpstream, shared_database: str, tmp_path: Path
) -> None:
    """The shim (RunSSE + BidiAppend): the tool's result, sent with the token after the server
    took the revocation in, is taken; the run ends at once with `unauthenticated` instead of
    waiting out the tool timeout. Reopening its stream, appending to it once it ended and a
    new run with the token are refused."""
    text = config_text(upstream, shared_database)
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    dave = added(token(config, "add", "dave"))
    prompt = unique('[tool Read {"path": "notes.txt"}]')
    with server_process(text, tmp_path) as server:
        async with http(server) as client:
            run = ShimRun(client, token=dave)
            async with run.subscribe() as reader:
                await run.append(run_request(prompt))
                ask = await reader.wait_for(exec_of("read_args"))
                done = await asyncio.to_thread(token, config, "revoke", "dave")
                assert done.returncode == 0, done.stderr
                await asyncio.to_thread(until, [server], 401, dave)  # the transport knows
                esm = ask.exec_server_message
                t0 = time.monotonic()
                await run.append(read_ok(esm.id, esm.read_args.path, "secret plans\n"))
                end = await reader.wait_end(timeout=15)
                took = time.monotonic() - t0
            message, _ = refused(end, "unauthenticated")
            assert message == "token 'dave' was revoked; ask for a new one"
            assert took < 10, took  # not the tool timeout (600 s)
            assert len(chat_requests(upstream, prompt)) == 1  # nothing after the result
            late = await cc.append(
                client, run.request_id, run.seq, read_ok(esm.id, "x", "y"), token=dave
            )
            assert late.status_code == 401, late.text
            async with cc.runsse(client, run.request_id, token=dave) as sse:
                again = Reader(sse, run.send)
                end = await again.wait_end()
                await again.close()
            assert code_of(end) == "unauthenticated"
            assert status(server, dave) == 401
            fresh = await cc.append(client, "after-revoke", 0, run_request("new"), token=dave)
            assert fresh.status_code == 401


# -- point 6: every database command on both backends ----------------------------------------


def test_every_database_command_on_both_backends(
    upstream: FakeUpstream, shared_database: str, tmp_path: Path
) -> None:
    """token add, list (--json, --all), rotate, revoke, open, close, doctor and models, each a
    child process, against a SQLite file and a real PostgreSQL; the server takes the tokens."""
    text = config_text(upstream, shared_database)
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    alice = added(token(config, "add", "alice", "--models", "brain-1", "--budget-usd", "0.02"))
    bob = added(token(config, "add", "bob", "--rpm", "30"))
    listing = token(config, "list")
    assert listing.returncode == 0, listing.stderr
    rows = {line.split()[0]: line for line in listing.stdout.splitlines()[1:]}
    assert set(rows) == {"alice", "bob"} and "$0.02" in rows["alice"]
    with server_process(text, tmp_path) as server:
        assert status(server) == 401 and status(server, alice) == 200
        end, answer = asyncio.run(shim_turn(server, bob, "bob on the server"))
        assert end == {} and answer == "You said: bob on the server"
        bob2 = added(token(config, "rotate", "bob"))
        until([server], 401, bob)
        assert status(server, bob2) == 200
    doc = json.loads(token(config, "list", "--json", "--all").stdout)
    documented = documented_json()  # docs/operations.md's shape, key for key
    assert doc.keys() == documented.keys() and doc["version"] == documented["version"]
    assert all(t.keys() == documented["tokens"][0].keys() for t in doc["tokens"])
    bobs = [t for t in doc["tokens"] if t["name"] == "bob"]
    assert [(t["active"], t["replaced"], t["llm_calls"]) for t in bobs] == [
        (True, False, 1),  # the person's call, made with the old secret, on the new token
        (False, True, 0),
    ]
    assert token(config, "revoke", "alice").returncode == 0
    assert token(config, "open").returncode == 0
    assert json.loads(token(config, "list", "--json").stdout)["access"] == "open"
    assert token(config, "close").returncode == 0
    doctor = cli("doctor", "--config", str(config), "--timeout", "10", cwd=tmp_path)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    out = " ".join(doctor.stdout.split())  # the table wraps its details
    assert "database OK " in out and re.search(r"schema v(\d+) \(latest \1\)", out)
    assert "tokens OK 1 active, this month" in out and "bob $0.000123;" in out
    models = cli("models", "--config", str(config), cwd=tmp_path)
    assert models.returncode == 0 and "brain-1" in models.stdout


def test_relative_sqlite_paths_are_read_beside_the_configuration(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """`database = "byok.db"` in /x/config.toml is /x/byok.db for the CLI and for `serve`,
    whatever folder they run in; a database left where the working directory had it stops
    both, with the way out."""
    home, elsewhere, run_in = (tmp_path / d for d in ("home", "elsewhere", "run-in"))
    for folder in (home, elsewhere, run_in):
        folder.mkdir()
    text = config_text(upstream, "byok.db")
    config = home / "cursor-byok.toml"
    config.write_text(text)
    frank = added(token(config, "add", "frank", cwd=elsewhere))
    assert (home / "byok.db").is_file() and not (elsewhere / "byok.db").exists()
    listing = token(config, "list", cwd=run_in)
    assert listing.stdout.splitlines()[1].startswith("frank")
    assert not (run_in / "byok.db").exists()
    with server_process(text, home, cwd=run_in) as server:
        assert status(server) == 401 and status(server, frank) == 200  # the same database
    assert not (run_in / "byok.db").exists()
    # A database where the working directory put it before, none beside the file: refused.
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "cursor-byok.toml").write_text(text)
    (run_in / "byok.db").write_bytes((home / "byok.db").read_bytes())
    done = token(moved / "cursor-byok.toml", "list", cwd=run_in)
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert f"server.database = 'byok.db' is read beside the configuration file: {moved}" in line
    assert f"the working directory holds {run_in / 'byok.db'}" in line
    serve = cli("serve", "--config", str(moved / "cursor-byok.toml"), cwd=run_in, timeout=30)
    assert serve.returncode == 2 and "is read beside the configuration file" in serve.stderr
    doctor = cli("doctor", "--config", str(moved / "cursor-byok.toml"), cwd=run_in)
    assert doctor.returncode == 1 and "is read beside the configuration" in doctor.stdout
    assert not (moved / "byok.db").exists()  # nothing made an empty one


# -- point 7: token add's mistakes, rotate, cheap spend ---------------------------------------


MISTAKES = [
    (("bob\n",), "token name 'bob\\n': use 1 to 64 letters"),
    (("",), "token name '': use 1 to 64 letters"),
    (("two words",), "token name 'two words'"),
    (("a" * 65,), "token name 'aaaa"),
    (("bob", "--models", ""), "--models names no model (it was given an empty value)"),
    (("bob", "--models", " , "), "--models names no model"),
    (("bob", "--models", "gamma", "composer"), "unknown model 'gamma'; this server offers: "),
    (("bob", "--rpm", "2^70"), "--rpm must be a whole number of model calls per minute"),
    (("bob", "--rpm", "1180591620717411303424"), "--rpm must be a whole number"),
    (("bob", "--rpm", "1.5"), "--rpm must be a whole number"),
    (("bob", "--rpm", "-3"), "--rpm must be a whole number"),
    (("bob", "--rpm", "0"), "--rpm must be a whole number"),
    (("bob", "--budget-usd", "ten"), "--budget-usd must be a number of dollars"),
    (("bob", "--budget-usd", "-1"), "--budget-usd must be a number of dollars"),
    (("bob", "--budget-usd", "nan"), "--budget-usd must be a number of dollars"),
    (("bob", "--budget-usd", "1e999"), "--budget-usd must be a number of dollars"),
    (("bob", "--budget-usd", "1e12"), "--budget-usd must be a number of dollars"),
]


@pytest.mark.parametrize(("args", "message"), MISTAKES, ids=lambda v: repr(v)[:40])
def test_token_add_refuses_each_mistake_in_one_line(
    upstream: FakeUpstream, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    config = tmp_path / "cursor-byok.toml"
    config.write_text(config_text(upstream, "byok.db"))
    done = token(config, "add", *args)
    assert (done.returncode, done.stdout) == (1, "")
    (line,) = done.stderr.splitlines()
    assert line.startswith("cursor-byok: ") and message in line, line
    assert not (tmp_path / "byok.db").exists()  # refused before the database is opened


def test_several_mistakes_are_each_named_and_nothing_is_stored(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    config = tmp_path / "cursor-byok.toml"
    config.write_text(config_text(upstream, "byok.db"))
    done = token(config, "add", "bob\n", "--models", "", "--rpm", "2^70", "--budget-usd", "x")
    assert (done.returncode, done.stdout) == (1, "")
    lines = done.stderr.splitlines()
    assert len(lines) == 4 and all(line.startswith("cursor-byok: ") for line in lines)
    assert "Traceback" not in done.stderr


def test_a_budget_needs_a_priced_model(upstream: FakeUpstream, tmp_path: Path) -> None:
    """A budget is counted from prices: none of the allowed models has any, it is refused,
    naming them; some have none, the token is made with a note naming those."""
    config = tmp_path / "cursor-byok.toml"
    config.write_text(config_text(upstream, "byok.db"))  # brain-1 priced, composer-test not
    done = token(config, "add", "carol", "--models", "composer", "--budget-usd", "1")
    assert (done.returncode, done.stdout) == (1, "")
    (line,) = done.stderr.splitlines()
    assert "--budget-usd: none of the models it may use has prices" in line
    assert line.endswith(
        "every one would be refused: composer-test; add prices to their [models.<id>] tables, "
        "or leave out --budget-usd"
    )
    some = token(config, "add", "carol", "--budget-usd", "1")  # all models: one is priced
    added(some)
    assert "it cannot call these models, without prices: composer-test" in some.stderr
    unpriced = tmp_path / "unpriced.toml"
    unpriced.write_text(config_text(upstream, "other.db", prices=False))
    none = token(unpriced, "add", "dan", "--budget-usd", "1")
    assert none.returncode == 1
    assert "none of the models of this server has prices" in none.stderr
    assert "brain-1, composer-test" in none.stderr


def test_cheap_spend_rotation_and_doctor(upstream: FakeUpstream, tmp_path: Path) -> None:
    """A turn of $0.000123 against a $0.0004 budget reads as such in `token list`, its JSON,
    doctor and the refusal; `token rotate` keeps the person (the spend goes on, the old secret
    is refused at its first model call, before the server refreshes); doctor names the
    tokens that can call nothing."""
    config = tmp_path / "cursor-byok.toml"
    text = config_text(upstream, "byok.db")
    config.write_text(text)
    gina = added(token(config, "add", "gina", "--models", "brain-1", "--budget-usd", "0.0004"))
    added(token(config, "add", "hal", "--models", "composer"))
    with server_process(text, tmp_path) as server:
        end, _ = asyncio.run(shim_turn(server, gina, "gina's first turn"))
        assert end == {}
        listing = token(config, "list")
        (row,) = [line for line in listing.stdout.splitlines() if line.startswith("gina")]
        assert row.split()[2:5] == ["$0.0004", "$0.000123", "1"], row
        rotated = token(config, "rotate", "gina")
        new = added(rotated)
        assert "rotated: a new secret, the same person (brain-1; $0.0004/month" in rotated.stderr
        # At once: by the runtime before the server's refresh, by the transport after it.
        prompt = unique("with the old secret")
        assert code_of(asyncio.run(h2_turn(server, gina, prompt))) == "unauthenticated"
        assert chat_requests(upstream, prompt) == []
        until([server], 200, new)  # the new secret, like a new token, within the refresh
        end, _ = asyncio.run(shim_turn(server, new, "gina's other turn"))
        assert end == {}  # $0.000123 spent + its $0.000246 bound fit $0.0004: then $0.000246
        end, _ = asyncio.run(shim_turn(server, new, "gina's third turn"))
        message, _ = refused(end, "resource_exhausted")
        assert message.startswith(
            "token 'gina' has too little of its monthly budget left for this model call: "
            "$0.000246 spent and $0.00 held by calls in flight of $0.0004 in "
        ), message
        assert "the call may cost up to $0.000246;" in message
    doc = json.loads(token(config, "list", "--json").stdout)
    (g,) = [t for t in doc["tokens"] if t["name"] == "gina"]
    assert g["llm_calls"] == 2 and g["cost_usd"] == pytest.approx(0.000246)
    assert g["budget_usd"] == 0.0004
    # The configuration changes under the tokens: composer goes, brain-1 loses its prices.
    changed = tmp_path / "changed.toml"
    changed.write_text(
        config_text(upstream, "byok.db", prices=False).split('[models."composer-test"]')[0]
    )
    doctor = cli("doctor", "--config", str(changed), "--timeout", "10", cwd=tmp_path)
    out = " ".join(doctor.stdout.split())
    assert "tokens OK 2 active, this month" in out and "gina $0.000246 of $0.0004" in out
    assert "token hal WARN none of its models is served by this configuration (composer)" in out
    assert (
        "token gina WARN it has a budget and none of the models it may use has prices (brain-1)"
        in out
    )
    # Reservations keep the server's spend within the budget; calls stored otherwise (before
    # reservations, or a provider that ignored the output cap) can pass it: doctor says so.
    asyncio.run(seed_call(tmp_path / "byok.db", g_id(tmp_path / "byok.db"), 0.0002))
    doctor = cli("doctor", "--config", str(changed), "--timeout", "10", cwd=tmp_path)
    out = " ".join(doctor.stdout.split())
    assert "token gina WARN it has spent its monthly budget: $0.000446 of $0.0004" in out


def g_id(db: Path) -> str:
    async def find() -> str:
        store = await SQLiteStore.open(db)
        try:
            return next(t.token_id for t in await store.list_access_tokens() if t.name == "gina")
        finally:
            await store.close()

    return asyncio.run(find())


async def seed_call(db: Path, token_id: str, cost: float) -> None:
    """A finished call of `token_id` this month costing `cost`, written to the database."""
    store = await SQLiteStore.open(db)
    call = LLMCallRecord(
        call_id="seeded-call",
        conversation_id="seeded-conversation",
        turn_id="t0",
        request=b"{}",
        request_hash=hashlib.sha256(b"{}").hexdigest(),
        messages_hash="m" * 64,
        status="committed",
        created_at_ms=int(time.time() * 1000),
        cost_usd=cost,
        token_id=token_id,
    )
    try:
        await store.commit_input(
            "seeded-conversation",
            input_id="i0",
            expected_version=0,
            state=b"s",
            append_messages=(),
            expected_message_count=0,
            result=b"r",
            llm_calls=(call,),
        )
    finally:
        await store.close()


async def h2_turn(server: ServerProcess, secret: str, prompt: str) -> dict[str, Any]:
    """One turn on an HTTP/2 Run stream: its end (an error when the server refuses it, at
    the stream's start or before the model call)."""
    client = await cc.H2Client.connect("127.0.0.1", server.port)
    try:
        stream = await client.open_run(token=secret)
        reader = Reader(stream, stream.send)
        with contextlib.suppress(Exception):  # the stream may have ended already
            await stream.send(run_request(prompt))
        end = await reader.wait_end()
        await reader.close()
    finally:
        await client.close()
    return end
