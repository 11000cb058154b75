#!/usr/bin/env bash
# Set up (see setup.sh), start RabbitMQ too, install PostgreSQL, run the static checks (lint.sh), and run the whole test
# suite against the real ActiveMQ, the real RabbitMQ and local Spark.
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/rabbitmq.sh start  # for tests/contract/test_rabbitmq.py (installs rabbitmq-server if missing)
scripts/postgresql.sh install  # the PostgreSQL ledger's tests start their own server
scripts/lint.sh
exec .venv/bin/python -m pytest "$@"
