#!/usr/bin/env bash
# System packages the test suite needs, from Debian: libaio-dev for DeepSpeed's async_io op (NVMe offload);
# chromium and chromium-driver to open the HTML report in a real headless browser; openssh-server/-client,
# pdsh, iproute2 and openmpi-bin (--launcher-backend openmpi) for the multi-node test bed (`dsbench testbed`); munge, slurmctld, slurmd and
# slurm-client for the SLURM launches (tests/integration/slurm_cluster.py starts a private cluster).
# Installs them when missing and we are root; otherwise says what is missing and goes on
# (the tests that need them then skip with that reason).
#
#   scripts/ensure_system_deps.sh               install what is missing, then return
#   scripts/ensure_system_deps.sh --start STATE install in the background (STATE.log, STATE.lock) and return at once
#   scripts/ensure_system_deps.sh --wait STATE  wait for that install, print what it said, warn about what is missing
#
# `make test` starts the install before the venv and waits for it before the integration tests, which are the only
# ones that need the packages: apt's 3 minutes on a fresh machine (2026-12-02) overlap pip's install and the unit
# tests instead of coming between them.
set -u
PACKAGES=(libaio-dev chromium chromium-driver openssh-server openssh-client pdsh iproute2 munge slurmctld slurmd
  slurm-client openmpi-bin)

missing_packages() {
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    # installed, not merely known: `dpkg -s` also succeeds for a package removed with its config files kept
    [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] || echo "$pkg"
  done
}

install() {
  local missing
  mapfile -t missing < <(missing_packages)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} (DeepSpeed NVMe offload, report browser test, multi-node test bed, SLURM)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 \
      || echo "warning: could not install ${missing[*]}; the tests that need them will skip"
  else
    echo "warning: ${missing[*]} missing and not root; the tests that need them will skip"
  fi
}

case "${1:-}" in
  --start)
    state=${2:?--start needs a STATE path}
    mkdir -p "$(dirname "$state")"
    : > "$state.log"
    [ -z "$(missing_packages)" ] && exit 0
    # sync point: the lock is taken here, before returning, so a --wait that comes at once still waits; the
    # background subshell inherits it and holds it until the install ends. Its commands run with the lock's fd
    # closed, so a daemon a package's script starts cannot hold it for good; the subshell's own output goes to the
    # log too, so a pipe that `make test` writes into (CI's tee) does not wait on it.
    exec 9>"$state.lock"
    flock 9
    (install 9>&-) >>"$state.log" 2>&1 </dev/null &
    ;;
  --wait)
    state=${2:?--wait needs a STATE path}
    [ -e "$state.lock" ] && flock "$state.lock" true  # sync point: the background install has ended
    [ -e "$state.log" ] && cat "$state.log"
    mapfile -t left < <(missing_packages)
    [ ${#left[@]} -eq 0 ] || grep -q "^warning:" "$state.log" 2>/dev/null \
      || echo "warning: ${left[*]} missing; the tests that need them will skip"
    ;;
  "")
    install
    ;;
  *)
    echo "usage: $0 [--start STATE | --wait STATE]" >&2
    exit 2
    ;;
esac
exit 0
