#!/usr/bin/env bash
# Set up (see setup.sh), start RabbitMQ too, and run the whole test suite against the real
# ActiveMQ, the real RabbitMQ and local Spark.
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/rabbitmq.sh start  # for tests/contract/test_rabbitmq.py (installs rabbitmq-server if missing)
exec .venv/bin/python -m pytest "$@"
