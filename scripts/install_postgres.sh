#!/usr/bin/env bash
# Install the PostgreSQL server binaries the suite starts a throwaway cluster with
# (tests/support/postgres.py: initdb, pg_ctl, postgres): Debian's `postgresql` package without
# recommends; and Debian's `nginx-light`, which tests/e2e/test_replicas.py runs with the
# sticky-routing configuration of docs/deploy.md. Only the binaries are used: neither package's
# service is started or left enabled at boot (scripts/apt_install.sh), and a cluster Debian's
# package started anyway is stopped (the tests make their own in a temporary folder, as the
# user `nobody`, on a free loopback port). Idempotent: does nothing when initdb is found in /usr/local/bin,
# /usr/lib/postgresql/*/bin or on PATH. Needs root (or sudo) for apt.
set -euo pipefail

found() {
    [ -x /usr/local/bin/initdb ] && return 0
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && return 0
    command -v initdb >/dev/null 2>&1
}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
# shellcheck source=scripts/apt_install.sh
source "$(dirname "$0")/apt_install.sh"

if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    echo "install_postgres: nginx missing; installing Debian's nginx-light" >&2
    apt_install nginx-light
    # Where the package started its service anyway, stop it: the tests run their own nginx.
    if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl stop nginx 2>/dev/null || true; fi
    if command -v service >/dev/null 2>&1; then $SUDO service nginx stop 2>/dev/null || true; fi
fi

if found; then
    echo "install_postgres: PostgreSQL server binaries present; nothing to do" >&2
    exit 0
fi
echo "install_postgres: initdb missing; installing Debian's postgresql" >&2
apt_install postgresql
# Where a service was started anyway, stop it: the tests never use it.
if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters --no-header 2>/dev/null | while read -r version name _; do
        $SUDO pg_ctlcluster "$version" "$name" stop 2>/dev/null || true
    done
fi
found || { echo "install_postgres: initdb still not found after the install" >&2; exit 1; }
echo "install_postgres: installed $(ls -d /usr/lib/postgresql/*/bin | tail -1)" >&2
