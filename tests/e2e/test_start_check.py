"""`cursor-byok serve` checks its database before serving it: a corrupted page is refused in one
line with exit status 2 (it used to serve, and only `doctor` noticed); a check that runs out of
time is one warning line and the server serves (docs/operations.md, "Limits and deadlines")."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cursor_byok.config import ConfigError, parse_config
from cursor_byok.doctor import check_database
from cursor_byok.launch import free_port, probe_health_blocking
from tests.support.databases import build_database, corrupt_middle_page
from tests.support.live import REPO

MODELS = """
[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.alpha]
provider = "local"
"""


def serve_command(tmp_path: Path, db: Path, port: int, server: str = "") -> list[str]:
    config = tmp_path / "cursor-byok.toml"
    config.write_text(f'[server]\nhost = "127.0.0.1"\n{server}\n{MODELS}')
    cmd = [sys.executable, "-m", "cursor_byok", "serve", "--config", str(config)]
    return [*cmd, "--db", str(db), "--port", str(port)]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}


def start(tmp_path: Path, db: Path, server: str = "") -> tuple[subprocess.Popen[bytes], int, Path]:
    """`cursor-byok serve` on `db` in a child process; returns it once it serves or has exited
    (with its port and the file its stderr and stdout go to)."""
    port = free_port()
    log_path = tmp_path / f"serve-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            serve_command(tmp_path, db, port, server),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment(),
        )
    deadline = time.monotonic() + 60
    while proc.poll() is None and not probe_health_blocking("127.0.0.1", port):
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"neither serving nor exited after 60 s:\n{log_path.read_text()}")
        time.sleep(0.05)
    return proc, port, log_path


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("fill", [b"\xde\xad\xbe\xef", b"\x00"], ids=["garbage", "zeros"])
def test_a_corrupted_middle_page_is_refused_at_start(tmp_path: Path, fill: bytes) -> None:
    db = tmp_path / "byok.db"
    build_database(db, conversations=60)
    k = corrupt_middle_page(db, fill)
    proc, port, log_path = start(tmp_path, db)
    serving = proc.poll() is None
    stop(proc)
    text = log_path.read_text()
    assert not serving, f"serving a database whose page {k} is corrupted:\n{text}"
    lines = text.strip().splitlines()
    assert proc.returncode == 2, text
    assert len(lines) == 1, text
    assert f"the database {db} is damaged" in lines[0], lines[0]
    assert "not serving it" in lines[0] and "`cursor-byok doctor`" in lines[0], lines[0]
    assert "Traceback" not in text and "serving on" not in text
    assert not probe_health_blocking("127.0.0.1", port)
    # doctor, which runs the full check, agrees
    assert asyncio.run(check_database(str(db))).status == "FAIL"


def test_a_check_cut_short_warns_and_serves(tmp_path: Path) -> None:
    db = tmp_path / "large.db"
    build_database(db, messages=40_000)  # ~55 MB: its check takes far longer than 1 ms
    proc, _, log_path = start(tmp_path, db, "start_check_s = 0.001")
    serving = proc.poll() is None
    stop(proc)
    text = log_path.read_text()
    assert serving, text
    warnings = [line for line in text.splitlines() if "cut short" in line]
    assert len(warnings) == 1, text
    assert "WARNING" in warnings[0] and str(db) in warnings[0], warnings[0]
    assert "server.start_check_s" in warnings[0] and "`cursor-byok doctor`" in warnings[0]


def test_a_healthy_database_serves_without_a_word_and_0_skips_the_check(tmp_path: Path) -> None:
    db = tmp_path / "byok.db"
    build_database(db, conversations=60)
    for server, damaged in (("", False), ("start_check_s = 0", True)):
        if damaged:
            corrupt_middle_page(db)  # unchecked, the damaged file is served as before
        proc, _, log_path = start(tmp_path, db, server)
        serving = proc.poll() is None
        stop(proc)
        text = log_path.read_text()
        assert serving, text
        assert "damaged" not in text and "cut short" not in text, text


def test_the_bound_is_validated() -> None:
    assert parse_config(f"[server]\n{MODELS}").server.start_check_s == 2.0
    with pytest.raises(ConfigError, match=r"server\.start_check_s"):
        parse_config(f"[server]\nstart_check_s = -1\n{MODELS}")
