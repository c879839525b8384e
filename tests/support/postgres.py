"""A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` in a temporary folder,
`postgres` on a free loopback port, trust authentication, removed on stop.

`initdb` refuses to run as root (CI runs as root), so as root the cluster belongs to the
unprivileged user `nobody`: its folder is chowned to it and every server command runs through
`runuser`. The binaries are found on PATH, in /usr/local/bin, or in Debian's
/usr/lib/postgresql/<major>/bin (scripts/prepare_real_parts.sh installs Debian's `postgresql`
where none is found).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

USER = "nobody"


def find_bin(name: str) -> str | None:
    """The path of a PostgreSQL server binary, or None when it is not installed."""
    for folder in ("/usr/local/bin", *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One running cluster. `url(db)` is the connection string of database `db`."""

    def __init__(self, *, fsync: bool = False) -> None:
        initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise RuntimeError(
                "PostgreSQL server binaries not found: run scripts/prepare_real_parts.sh "
                "(it installs Debian's postgresql package)"
            )
        self._pg_ctl = pg_ctl
        self._as_owner = os.geteuid() == 0
        # As root the cluster's folder must be reachable by `nobody`: /tmp is, whatever
        # TMPDIR points at (a folder under /root would not be).
        base = "/tmp" if self._as_owner and os.path.isdir("/tmp") else None
        self._root = Path(tempfile.mkdtemp(prefix="cbyok-pg-", dir=base))
        self.data = self._root / "data"
        self.port = _free_port()
        self.startup_s = 0.0
        started = time.monotonic()
        if self._as_owner:
            shutil.chown(self._root, USER)
            os.chmod(self._root, 0o700)
        self._run(
            [
                initdb,
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ]
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self._root} -c fsync={'on' if fsync else 'off'} "
            "-c max_connections=200 -c shared_buffers=32MB"
        )
        self._options = options
        self.start_server()
        self.startup_s = time.monotonic() - started
        self._created: set[str] = set()

    def start_server(self) -> None:
        """Start the cluster's server (again, after `stop_server`), on the same port."""
        self._run(
            [
                self._pg_ctl,
                "-D",
                str(self.data),
                "-o",
                self._options,
                "-l",
                str(self._root / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server, keeping the cluster (`fast`: its connections are closed, as on a
        restart; `immediate`: as on a crash)."""
        self._run([self._pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop"])

    def _run(self, argv: list[str]) -> None:
        if self._as_owner:
            argv = ["runuser", "-u", USER, "--", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            log = self._root / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{argv[-1]} failed: {proc.stderr[-2000:]}\n{tail}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self._created.add(name)
        return self.url(name)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run([self._pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self._root, ignore_errors=True)


@contextlib.contextmanager
def cluster(*, fsync: bool = False) -> Iterator[Cluster]:
    c = Cluster(fsync=fsync)
    try:
        yield c
    finally:
        c.stop()


@contextlib.contextmanager
def reader(database: str | os.PathLike[str]) -> Iterator[Any]:
    """A connection that reads the store's tables from outside, with `?` placeholders on both
    backends: SQLite's own (read-only), or psycopg's behind the store's adapter."""
    name = os.fspath(database)
    if name.startswith("postgresql://"):
        import psycopg

        from cursor_byok.store.postgres.conn import PgConn

        with psycopg.connect(name, autocommit=True) as conn:
            yield PgConn(conn)
        return
    conn3 = sqlite3.connect(f"file:{name}?mode=ro", uri=True, timeout=5)
    try:
        yield conn3
    finally:
        conn3.close()
