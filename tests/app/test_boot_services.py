"""The test set-up leaves no service enabled at boot.

Debian's nginx-light enables nginx.service when installed, postgresql enables
postgresql.service; the suite runs its own of each and never needs them. scripts/test runs the
set-up (scripts/prepare_real_parts.sh) before pytest, so here this machine is checked as the
set-up left it: no package that apt's history shows the set-up's own command line installed
(with its dependencies) has a unit enabled in /etc/systemd/system. Read independently of
scripts/boot_services_off.py, which does the disabling.
"""

from __future__ import annotations

import gzip
import re
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO

SETUP_PACKAGES = ("nginx-light", "postgresql", "chromium-headless-shell", "iproute2")
UNIT_DIRS = (Path("/lib/systemd/system"), Path("/usr/lib/systemd/system"))


def _history() -> str:
    texts = []
    for path in sorted(Path("/var/log/apt").glob("history.log*")):
        raw = path.read_bytes()
        text = gzip.decompress(raw) if path.suffix == ".gz" else raw
        texts.append(text.decode("utf-8", "replace"))
    return "\n".join(texts)


def _installed_by_the_setup() -> set[str]:
    commands = {f"apt-get install -y --no-install-recommends {p}" for p in SETUP_PACKAGES}
    packages: set[str] = set()
    for block in re.split(r"\n\s*\n", _history()):
        command = re.search(r"^Commandline: (.*)$", block, re.M)
        install = re.search(r"^Install: (.*)$", block, re.M)
        if command and install and command.group(1).strip() in commands:
            packages |= set(re.findall(r"(?:^|, )([a-z0-9][a-z0-9.+-]*):", install.group(1)))
    return packages


def _enabled_at_boot() -> dict[str, Path]:
    """unit name -> the unit file an /etc/systemd/system/*.wants/ link points to."""
    wants = Path("/etc/systemd/system").glob("*.wants/*")
    return {link.name: link.resolve() for link in wants if link.is_symlink()}


def test_no_package_the_setup_installed_starts_a_service_at_boot() -> None:
    if not Path("/var/log/apt").is_dir():
        pytest.skip("not a Debian machine: the set-up installs nothing with apt here")
    packages = _installed_by_the_setup()
    owned: dict[Path, str] = {}
    for package in sorted(packages):
        listed = subprocess.run(
            ["dpkg", "-L", package], capture_output=True, text=True, check=False
        ).stdout
        for line in listed.splitlines():
            path = Path(line)
            if path.parent in UNIT_DIRS and path.suffix in (".service", ".socket", ".timer"):
                owned[path.resolve()] = package
    links = _enabled_at_boot().items()
    enabled = {f"{unit} ({owned[target]})" for unit, target in links if target in owned}
    assert sorted(enabled) == [], f"the set-up left these enabled at boot: {sorted(enabled)}"


def test_the_setup_installs_through_the_helper_that_disables_them() -> None:
    """Every apt-get install of the set-up goes through scripts/apt_install.sh."""
    for name in ("install_browser.sh", "install_postgres.sh", "prepare_real_parts.sh"):
        lines = (REPO / "scripts" / name).read_text().splitlines()
        code = [line for line in lines if not line.lstrip().startswith(("#", "echo "))]
        assert [line for line in code if "apt-get install" in line] == [], name
    assert "boot_services_off.py" in (REPO / "scripts" / "apt_install.sh").read_text()
    assert "boot_services_off.py" in (REPO / "scripts" / "prepare_real_parts.sh").read_text()
