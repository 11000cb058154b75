#!/usr/bin/env bash
# Set up (see setup.sh) and run the whole test suite against the real ActiveMQ and local Spark.
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
