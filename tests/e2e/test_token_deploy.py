"""The token commands of docs/deploy.md under compose, run as written (without the container
part) against a real PostgreSQL with the doc's compose configuration; and a database URL's
password, right or malformed, never in what the CLI prints or the server logs."""

from __future__ import annotations

import asyncio
import re
import shlex
import uuid
from pathlib import Path

import psycopg
import pytest

from cursor_byok.launch import free_port
from tests.e2e.test_token_admin import clean_env, cli, config_text, status
from tests.e2e.test_tokens import shim_turn
from tests.paths import REPO
from tests.support.live import server_process
from tests.support.postgres import Cluster
from tests.support.upstream import FakeUpstream

DOC = (REPO / "docs" / "deploy.md").read_text()
COMPOSE_EXEC = "docker compose -f deploy/compose.yaml exec cursor-byok "
PLANTED = "PLANTED-pg-pass-9f3e"  # PGPASSWORD in the compose service; never printed


def section(title: str) -> str:
    start = DOC.index(f"## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end > 0 else None]


def compose_config() -> str:
    (block,) = re.findall(r"```toml\n(.*?)```", section("Compose with PostgreSQL"), flags=re.S)
    assert 'database = "postgresql://cursor_byok@postgres:5432/cursor_byok"' in block
    return block


def compose_token_lines() -> list[list[str]]:
    """The doc's compose `token` lines, without the container part, as argv words."""
    lines = re.findall(r"^ {4}(\S.*)$", section("Tokens per person"), flags=re.M)
    found = [
        shlex.split(line[len(COMPOSE_EXEC) :])
        for line in lines
        if line.startswith(COMPOSE_EXEC + "cursor-byok token ")
    ]
    assert len(found) >= 2, lines
    return found


def test_the_compose_token_commands_run_as_written(
    upstream: FakeUpstream, pg_cluster: Cluster, tmp_path: Path
) -> None:
    with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS cursor_byok")
        conn.execute("DROP ROLE IF EXISTS cursor_byok")
        conn.execute("CREATE ROLE cursor_byok LOGIN")
        conn.execute("CREATE DATABASE cursor_byok OWNER cursor_byok")
    # The compose configuration as the doc gives it, at this cluster's address, with the
    # operator's models ("as in Container above": theirs; gpt-5 has prices, as the doc's
    # --budget-usd needs).
    text = compose_config().replace("postgres:5432", f"127.0.0.1:{pg_cluster.port}")
    text += f"""
[providers.openai]
api = "openai-chat"
base_url = "{upstream.base_url}/v1"

[models.gpt-5]
provider = "openai"
prices = {{ input = 1.25, output = 10.0 }}
"""
    etc, data = tmp_path / "etc", tmp_path / "var-lib"  # /etc/cursor-byok, the WORKDIR
    etc.mkdir()
    data.mkdir()
    (etc / "config.toml").write_text(text)
    env = clean_env(data, CURSOR_BYOK_CONFIG=str(etc / "config.toml"), PGPASSWORD=PLANTED)
    outputs = []
    for words in compose_token_lines():
        assert words[0] == "cursor-byok"
        done = cli(*words[1:], cwd=data, env=env)
        assert done.returncode == 0, (words, done.stderr)
        outputs.append(done)
        if words[1:3] == ["token", "add"]:
            assert done.stdout.startswith("cbk_")
            assert "token 'alice' added (gpt-5; $50.00/month; 30 calls/min)" in done.stderr
        if words[1:3] == ["token", "list"]:
            (row,) = done.stdout.splitlines()[1:]
            assert row.split()[:3] == ["alice", "gpt-5", "$50.00"]
    assert not list(data.iterdir()) and not (etc / "cursor-byok.db").exists()  # no SQLite
    with psycopg.connect(pg_cluster.url("cursor_byok"), autocommit=True) as conn:
        rows = conn.execute("SELECT name, rpm FROM access_tokens").fetchall()
    assert rows == [("alice", 30)]
    for done in outputs:
        assert PLANTED not in done.stdout + done.stderr


BAD_URLS = [
    # libpq quotes the part of a URL it cannot read: here the password.
    "postgresql://cursor:{pw}%ZZ@127.0.0.1:{port}/db",
    # urllib cannot split it (the port): a traceback showed the URL.
    "postgresql://cursor:{pw}@127.0.0.1:notaport/db",
    # an `@` in the password: libpq cuts it there and names the rest as the host.
    "postgresql://cursor:ab@{pw}@127.0.0.1:{port}/db",
    "postgresql://cursor@127.0.0.1:{port}/db?password={pw}&sslmode=bogus",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_malformed_url_never_shows_its_password(
    upstream: FakeUpstream, pg_cluster: Cluster, tmp_path: Path, url: str
) -> None:
    secret = f"Pw{uuid.uuid4().hex[:10]}"
    database = url.format(pw=secret, port=pg_cluster.port)
    config = tmp_path / "cursor-byok.toml"
    config.write_text(config_text(upstream, database))
    port = str(free_port())
    runs = {
        "token list": (cli("token", "list", "--config", str(config), cwd=tmp_path), 1),
        "token add": (cli("token", "add", "x", "--config", str(config), cwd=tmp_path), 1),
        "doctor": (cli("doctor", "--config", str(config), "--timeout", "5", cwd=tmp_path), 1),
        "serve": (cli("serve", "--config", str(config), "--port", port, cwd=tmp_path), 2),
    }
    for what, (done, code) in runs.items():
        shown = done.stdout + done.stderr
        assert done.returncode == code, (what, shown)
        assert secret not in shown and secret[2:8] not in shown, (what, shown)
        assert "Traceback" not in shown, (what, shown)
    (line,) = runs["token list"][0].stderr.splitlines()
    assert line.startswith("cursor-byok: cannot use the database: postgresql://cursor@"), line


def test_a_right_password_never_reaches_the_log_or_the_output(
    upstream: FakeUpstream, pg_cluster: Cluster, tmp_path: Path
) -> None:
    """The cluster trusts loopback, so a URL with a password connects: the password is in
    the configuration only."""
    name = f"pw{uuid.uuid4().hex[:8]}"
    pg_cluster.create_database(name)
    secret = f"Right{uuid.uuid4().hex[:12]}"
    database = f"postgresql://postgres:{secret}@127.0.0.1:{pg_cluster.port}/{name}"
    text = config_text(upstream, database, extra='log_level = "debug"')
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    done = [
        cli("token", "add", "ivy", "--config", str(config), cwd=tmp_path),
        cli("token", "list", "--json", "--config", str(config), cwd=tmp_path),
        cli("doctor", "--config", str(config), "--timeout", "10", cwd=tmp_path),
    ]
    assert [d.returncode for d in done] == [0, 0, 0], [d.stdout + d.stderr for d in done]
    ivy = done[0].stdout.strip()
    with server_process(text, tmp_path) as server:
        end, _ = asyncio.run(shim_turn(server, ivy, "ivy's turn"))
        assert end == {} and status(server) == 401
        log = server.log()
    assert f"postgresql://postgres@127.0.0.1:{pg_cluster.port}/{name}" in done[2].stdout
    for text_out in [log, *(d.stdout + d.stderr for d in done)]:
        assert secret not in text_out
