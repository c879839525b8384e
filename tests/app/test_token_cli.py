"""`cursor-byok token add|list|revoke`: the secret once on stdout, its hash in the database,
clear errors for every mistake."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import psycopg
import pytest

from cursor_byok.cli import main
from tests.support.postgres import Cluster

CONFIG = """
[server]
database = "{db}"

[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.alpha]
provider = "local"
aliases = ["fast"]
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "cursor-byok.toml"
    path.write_text(CONFIG.format(db=tmp_path / "byok.db"))
    return path


def run(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["token", *args, "--config", str(config)])
    out, err = capsys.readouterr()
    return code, out, err


def test_add_shows_the_secret_once_and_stores_its_hash(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(config, capsys, "add", "alice", "--models", "fast,alpha", "--rpm", "5")
    assert code == 0
    secret = out.strip()
    assert secret.startswith("cbk_") and secret not in err
    assert "token 'alice' added (fast, alpha; no budget; 5 calls/min)" in err
    conn = sqlite3.connect(config.parent / "byok.db")
    (row,) = conn.execute("SELECT name, secret_hash, models, rpm FROM access_tokens").fetchall()
    conn.close()
    assert row == ("alice", hashlib.sha256(secret.encode()).hexdigest(), '["fast","alpha"]', 5)
    code, out, _ = run(config, capsys, "list")
    assert code == 0 and secret not in out
    assert out.splitlines()[1].split()[:2] == ["alice", "fast,"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "two words"), "token name 'two words': use 1 to 64 letters"),
        (("add", "bob", "--models", "gamma"), "unknown model 'gamma'; this server offers: alpha"),
        (("add", "bob", "--budget-usd", "-1"), "--budget-usd must be a number of dollars"),
        (("add", "bob", "--budget-usd", "nan"), "--budget-usd must be a number of dollars"),
        (("add", "bob", "--rpm", "0"), "--rpm must be a whole number of model calls per minute"),
        (("revoke", "nobody"), "no active token is named 'nobody'"),
    ],
)
def test_mistakes_are_named(
    config: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, out, err = run(config, capsys, *args)
    assert code == 1 and out == ""
    assert err.startswith("cursor-byok: ") and message in err


def test_one_active_token_per_name(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(config, capsys, "add", "alice")[0] == 0
    code, out, err = run(config, capsys, "add", "alice")
    assert (code, out) == (1, "")
    assert "a token named 'alice' is active; revoke it first" in err
    assert run(config, capsys, "revoke", "alice")[0] == 0
    assert run(config, capsys, "add", "alice")[0] == 0
    code, out, _ = run(config, capsys, "list", "--all")
    assert code == 0 and "(revoked)" in out and out.count("alice") == 2


def test_tokens_live_in_a_postgresql_database_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pg_cluster: Cluster
) -> None:
    """`token` opens the database `serve` would: a postgresql:// URL is PostgreSQL, not the
    name of a SQLite file."""
    url = pg_cluster.create_database("tokens_cli")
    path = tmp_path / "pg.toml"
    path.write_text(CONFIG.format(db=url))
    code, out, err = run(path, capsys, "add", "carol")
    assert code == 0, err
    secret = out.strip()
    code, out, _ = run(path, capsys, "list")
    assert code == 0 and out.splitlines()[1].split()[0] == "carol"
    with psycopg.connect(url) as conn:
        (hashed,) = conn.execute("SELECT secret_hash FROM access_tokens").fetchone() or ("",)
    assert hashed == hashlib.sha256(secret.encode()).hexdigest()
    assert not list(tmp_path.glob("postgresql*")) and not Path("postgresql:").exists()
