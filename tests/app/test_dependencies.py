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
