#!/usr/bin/env python3
"""Leaves no service enabled at boot by the packages the test set-up installed.

Debian's packages enable their services when installed: nginx-light enables nginx.service,
postgresql enables postgresql.service. The suite runs its own nginx and PostgreSQL in
temporary folders and never uses those services, so the set-up (scripts/install_postgres.sh,
scripts/install_browser.sh, scripts/prepare_real_parts.sh) disables them after each install,
and on every run also what an earlier run left enabled.

Which packages the set-up installed is read from apt's history: the transactions whose
command line is exactly one of the set-up's own (SETUP_COMMANDS), and every package, with its
dependencies, they installed. A service of a package installed any other way is left alone.

    scripts/boot_services_off.py           disable them (root), print each one
    scripts/boot_services_off.py --list    only print the ones still enabled
"""

from __future__ import annotations

import glob
import gzip
import os
import re
import shutil
import subprocess
import sys

# The set-up's apt-get command lines (scripts/apt_install.sh runs exactly these).
SETUP_COMMANDS = frozenset(
    f"apt-get install -y --no-install-recommends {package}"
    for package in ("nginx-light", "postgresql", "chromium-headless-shell", "iproute2")
)
HISTORY = "/var/log/apt/history.log*"
UNIT = re.compile(r"/(?:usr/)?lib/systemd/system/([^/@]+\.(?:service|socket|timer))$")


def history_text() -> str:
    parts = []
    for path in sorted(glob.glob(HISTORY)):
        opener = gzip.open if path.endswith(".gz") else open
        try:
            with opener(path, "rt", errors="replace") as f:
                parts.append(f.read())
        except OSError:
            continue
    return "\n".join(parts)


def installed_by_setup(history: str) -> set[str]:
    """The packages apt installed in the set-up's own transactions."""
    packages: set[str] = set()
    for entry in history.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in entry.strip().splitlines() if ": " in line)
        if fields.get("Commandline", "").strip() in SETUP_COMMANDS:
            for item in fields.get("Install", "").split("), "):
                name = item.strip().split(" ", 1)[0].split(":", 1)[0]
                if name:
                    packages.add(name)
    return packages


def units_of(package: str) -> list[str]:
    listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=False)
    return sorted({m.group(1) for line in listed.stdout.splitlines() if (m := UNIT.search(line))})


def enabled(unit: str) -> bool:
    """Linked from a target's .wants folder: what a package's enable makes, with or without
    systemd running (or installed)."""
    return any(glob.glob(f"/etc/systemd/system/*.wants/{glob.escape(unit)}"))


def disable(unit: str) -> None:
    """Offline, as the package's own enable was. Without systemctl (a machine without systemd
    still gets the links) the links go, which is all `disable` does. Either way a later
    upgrade of the package finds the unit disabled and keeps it so (deb-systemd-helper
    re-enables only what it finds enabled)."""
    if shutil.which("systemctl"):
        subprocess.run(["systemctl", "disable", "--quiet", unit], check=True)
        return
    for link in glob.glob(f"/etc/systemd/system/*.wants/{glob.escape(unit)}"):
        os.unlink(link)


def main(argv: list[str]) -> int:
    if shutil.which("dpkg") is None:
        return 0  # not Debian: the set-up installs nothing with apt here
    packages = installed_by_setup(history_text())
    units = [u for p in sorted(packages) for u in units_of(p) if enabled(u)]
    if "--list" in argv:
        print("\n".join(units))
        return 0
    for unit in units:
        disable(unit)
        print(f"boot_services_off: {unit} no longer starts at boot (the tests run their own)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
