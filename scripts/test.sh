#!/usr/bin/env bash
# Set up (see setup.sh), start RabbitMQ too, install PostgreSQL, Chromium and Prometheus
# (test-tools.sh), run the static checks (lint.sh), and run the whole test suite against the real
# ActiveMQ, the real RabbitMQ, local Spark, a Spark Connect server and a standalone cluster, PostgreSQL,
# a headless Chromium, an S3-compatible server (S3Proxy) and Hadoop's HDFS mini cluster (the tests start
# and stop those servers themselves). A broker this script
# started is stopped again at the end; one that was already running is left running.
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
amq_before=$(scripts/activemq.sh status 2>/dev/null || true)
rabbit_before=$(scripts/rabbitmq.sh status 2>/dev/null || true)
stop_started_brokers() {
    [ "$amq_before" = running ] || scripts/activemq.sh stop >/dev/null 2>&1 || true
    [ "$rabbit_before" = running ] || scripts/rabbitmq.sh stop >/dev/null 2>&1 || true
}
trap stop_started_brokers EXIT
scripts/setup.sh
scripts/rabbitmq.sh start  # for tests/contract/test_rabbitmq.py (installs rabbitmq-server if missing)
scripts/test-tools.sh  # PostgreSQL, Chromium, Prometheus (the tests start their own servers)
# S3A's and the HDFS mini cluster's jars, and S3Proxy: the tests of Delta tables on s3a:// and hdfs://
# start scripts/s3.sh and scripts/hdfs.sh themselves (tests/support/object_stores.py).
scripts/jars.sh s3 hdfs-test iceberg iceberg-rest-test
scripts/s3.sh install
scripts/lint.sh
echo "test.sh: set-up and static checks took $SECONDS s"  # what each part costs, in every CI log
# --durations=40: every CI log shows where the time goes (the 40 slowest setups, calls and teardowns),
# whatever addopts pyproject.toml holds. With no arguments, the whole suite in two runs: the unit tests
# on four worker processes (pytest-xdist; they use no server and wait more than they compute: 80 s
# here against 170 s in one process, 97 s on two), then the contract and integration tests on two
# workers, each module whole on one of them (--dist loadfile: its module-scoped servers start once;
# they wait far more than they compute: 35 min here, their own times adding up to 69). The brokers,
# the S3 server and the HDFS cluster on their fixed ports are shared by both workers
# (tests/support/run_servers.py); every other server a test starts is its own, on a free port. Both
# runs run whatever the first's outcome; either failing fails this script.
if [ $# -gt 0 ]; then  # not exec'd: the EXIT trap stops the brokers this script started
    .venv/bin/python -m pytest --durations=40 "$@"
    exit 0
fi
status=0
.venv/bin/python -m pytest --durations=10 -n 4 tests/unit || status=$?
.venv/bin/python -m pytest --durations=40 -n 2 --dist loadfile tests/contract tests/integration || status=$?
exit $status
