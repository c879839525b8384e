"""Every runtime dependency is imported by the server itself: one only the tests need belongs
in the `dev` extras, so a user's install does not carry it."""

from __future__ import annotations

import re
import tomllib

from tests.paths import REPO

# Distribution name -> the module the server imports it as.
MODULES = {"protobuf": "google.protobuf", "prometheus-client": "prometheus_client"}


def _imported_by_src(module: str) -> bool:
    pattern = re.compile(rf"^\s*(from|import)\s+{re.escape(module)}\b", re.MULTILINE)
    return any(
        pattern.search(path.read_text(encoding="utf-8"))
        for path in (REPO / "src").rglob("*.py")
        if "/proto/" not in path.as_posix()  # generated code
    )


def test_every_runtime_dependency_is_imported_by_the_server() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0] for spec in project["dependencies"]]
    unused = [n for n in names if not _imported_by_src(MODULES.get(n, n.replace("-", "_")))]
    assert unused == [], f"runtime dependencies the server never imports: {unused}"


def test_postgresql_support_is_the_postgres_extra() -> None:
    """Most users serve SQLite: psycopg is installed with `cursor-byok[postgres]` only (the
    image and scripts/test ask for it; tests/app/test_packaging.py runs the wheel without)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = [re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0] for spec in project["dependencies"]]
    assert "psycopg" not in core
    extras = project["optional-dependencies"]
    assert [spec.split("[")[0].split(">")[0] for spec in extras["postgres"]] == ["psycopg"]
    assert _imported_by_src("psycopg")
    assert "cursor-byok[postgres]" in extras["dev"]
    assert "'.[dev,postgres]'" in (REPO / "scripts" / "test").read_text()
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "'.[postgres]'" in dockerfile and "'cursor-byok[postgres]'" in dockerfile
