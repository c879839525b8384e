"""deploy/compose.yaml is a valid Compose file that interpolates as docs/deploy.md says: the
password comes from deploy/.env into both services, and a missing one stops compose with a
message naming the file. Checked with `docker-compose config` (Debian's docker-compose, which
validates against the Compose schema); skipped, with the reason, where it is not installed.
Nothing is started: the images cannot be pulled here, and the PostgreSQL backend is another
branch of issue 18."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO


def compose_config(folder: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    return subprocess.run(
        [binary, "-f", str(folder / "compose.yaml"), "config"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_compose_file_interpolates_the_password_into_both_services(tmp_path: Path) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    shutil.copy(REPO / "deploy" / "compose.yaml", deploy / "compose.yaml")
    (deploy / ".env").write_text("POSTGRES_PASSWORD=pw-from-env-file\nOPENAI_API_KEY=sk-x\n")
    result = compose_config(deploy)
    assert result.returncode == 0, result.stderr
    config = result.stdout
    assert config.count("pw-from-env-file") == 3  # postgres, and cursor-byok's env and PGPASSWORD
    assert "PGPASSWORD: pw-from-env-file" in config
    assert "condition: service_healthy" in config
    assert f"context: {tmp_path}" in config  # the repository's root, where the Dockerfile is
    assert f"{deploy}/config:/etc/cursor-byok:ro" in config


def test_a_missing_password_stops_compose_with_the_file_to_fix(tmp_path: Path) -> None:
    shutil.copy(REPO / "deploy" / "compose.yaml", tmp_path / "compose.yaml")
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-x\n")
    result = compose_config(tmp_path)
    assert result.returncode != 0
    assert "set POSTGRES_PASSWORD in deploy/.env" in result.stderr
