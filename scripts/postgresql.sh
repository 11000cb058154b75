#!/usr/bin/env bash
# Install PostgreSQL (Debian package `postgresql`) for the tests of the PostgreSQL landing ledger.
# The tests start and stop their own server (tests/support/postgres.py: initdb in a temporary
# directory, a free port on 127.0.0.1); the package's own cluster is stopped so it holds nothing.
#   scripts/postgresql.sh install
set -euo pipefail

install() {
    if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        echo "postgresql: installing postgresql (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq
        $SUDO apt-get install -y -qq postgresql >/dev/null
    fi
    systemctl stop postgresql 2>/dev/null || true
}

case "${1:-}" in
    install) install ;;
    *) echo "usage: $0 install" >&2; exit 2 ;;
esac
