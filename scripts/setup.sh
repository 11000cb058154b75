#!/usr/bin/env bash
# Set up everything mqbridge needs on a Debian machine: Java (a JDK), ActiveMQ (started, STOMP on
# 127.0.0.1:61613), and a virtualenv in .venv with mqbridge installed in editable mode.
# The editable install is setuptools' *strict* mode: a tree of links under build/ that mypy and IDEs
# can follow (the folders map to the one import root `mqbridge`); run this script again after adding
# or renaming a module.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# a JDK, not only a runtime: `mqbridge jars delta` compiles the Delta log store of s3a:// tables with its
# javac (mqbridge.landing.log_store)
command -v javac >/dev/null 2>&1 || need_apt+=(default-jdk-headless)
[ -f /usr/share/activemq/bin/activemq.jar ] || need_apt+=(activemq)
python3 -m venv --help >/dev/null 2>&1 || need_apt+=(python3-venv)
# systemd-analyze verifies the rendered service unit in the tests (not started as init)
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
# Maven fetches the Delta Lake jars (scripts/jars.sh) from Maven Central
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]" --config-settings editable_mode=strict
scripts/jars.sh delta  # the Delta Lake jars Spark loads for `table_format = "delta"`, into jars/delta

scripts/activemq.sh start
