#!/usr/bin/env bash
# Set up (see setup.sh), start RabbitMQ too, install PostgreSQL, Chromium and Prometheus
# (test-tools.sh), run the static checks (lint.sh), and run the whole test suite against the real
# ActiveMQ, the real RabbitMQ, local Spark, a Spark Connect server and a standalone cluster, PostgreSQL
# and a headless Chromium (the tests start and stop those servers themselves).
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/rabbitmq.sh start  # for tests/contract/test_rabbitmq.py (installs rabbitmq-server if missing)
scripts/test-tools.sh  # PostgreSQL, Chromium, Prometheus (the tests start their own servers)
scripts/lint.sh
exec .venv/bin/python -m pytest "$@"
