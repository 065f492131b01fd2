#!/usr/bin/env bash
# System packages the test suite needs: libaio-dev for DeepSpeed's async_io op (NVMe offload).
# Installs them when missing and we are root; otherwise says what is missing and goes on
# (the NVMe tests then skip with that reason).
set -u
missing=()
dpkg -s libaio-dev >/dev/null 2>&1 || missing+=(libaio-dev)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing ${missing[*]} (DeepSpeed NVMe offload)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null 2>&1 \
    || echo "warning: could not install ${missing[*]}; NVMe offload tests will skip"
else
  echo "warning: ${missing[*]} missing and not root; NVMe offload tests will skip"
fi
exit 0
