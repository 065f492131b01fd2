#!/usr/bin/env bash
# System packages the test suite needs, from Debian: libaio-dev for DeepSpeed's async_io op (NVMe offload);
# chromium and chromium-driver to open the HTML report in a real headless browser; openssh-server/-client,
# pdsh, iproute2 and openmpi-bin (--launcher-backend openmpi) for the multi-node test bed (`dsbench testbed`); munge, slurmctld, slurmd and
# slurm-client for the SLURM launches (tests/integration/slurm_cluster.py starts a private cluster).
# Installs them when missing and we are root; otherwise says what is missing and goes on
# (the tests that need them then skip with that reason).
set -u
missing=()
for pkg in libaio-dev chromium chromium-driver openssh-server openssh-client pdsh iproute2 munge slurmctld slurmd \
  slurm-client openmpi-bin; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing ${missing[*]} (DeepSpeed NVMe offload, report browser test, multi-node test bed, SLURM)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 \
    || echo "warning: could not install ${missing[*]}; the tests that need them will skip"
else
  echo "warning: ${missing[*]} missing and not root; the tests that need them will skip"
fi
exit 0
