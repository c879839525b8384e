# Sourced by the container scripts: podman reads scripts/podman-containers.conf (the
# machine's own containers.conf is untouched). An exported CONTAINERS_CONF wins.
export CONTAINERS_CONF=${CONTAINERS_CONF:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/podman-containers.conf}
