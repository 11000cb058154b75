#!/usr/bin/env bash
# Install the Debian packages the tests use besides the brokers: PostgreSQL (the PostgreSQL ledger's
# tests start their own server: tests/support/postgres.py), Chromium (the status page in a real
# headless browser), Prometheus (promtool and a real Prometheus for the alert rules) and iproute2
# with util-linux (`ip netns`, `unshare`: the bridge hosts of tests/support/hosts.py). Their
# package services are stopped: the tests start what they need on free ports and stop it.
#   scripts/test-tools.sh
set -euo pipefail

need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v faketime >/dev/null 2>&1 || need+=(faketime)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    echo "test tools: installing ${need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
for service in postgresql prometheus prometheus-node-exporter; do
    systemctl stop "$service" 2>/dev/null || true
done
