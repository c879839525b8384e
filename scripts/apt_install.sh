# Sourced by the set-up scripts (install_browser.sh, install_postgres.sh, prepare_real_parts.sh): `apt_install PKG`
# installs one Debian package the tests use, without recommends, and leaves the machine as
# the tests need it and no more: no service of it started during the install (a temporary
# policy-rc.d where the machine has none) and none enabled at boot
# (scripts/boot_services_off.py, which also disables what an earlier run left enabled).
# The apt-get command line stays exactly `apt-get install -y --no-install-recommends PKG`:
# boot_services_off.py recognises the set-up's packages in apt's history by it.

apt_install() {
  local package=$1 sudo="" policy=/usr/sbin/policy-rc.d made="" rc=0
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  if [ ! -e "$policy" ]; then
    # 101: "action forbidden", so invoke-rc.d and deb-systemd-invoke start nothing.
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod 0755 "$policy"
    made=1
  fi
  echo "apt_install: ${sudo:+$sudo }apt-get install -y --no-install-recommends $package" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$package" \
    || { $sudo apt-get update \
         && $sudo env DEBIAN_FRONTEND=noninteractive \
              apt-get install -y --no-install-recommends "$package"; } \
    || rc=$?
  if [ -n "$made" ]; then $sudo rm -f "$policy"; fi
  $sudo python3 "$here/boot_services_off.py" >&2 || true
  return "$rc"
}
