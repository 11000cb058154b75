#!/usr/bin/env bash
# The demo: set up, put sample messages on a local ActiveMQ, run the bridge until idle, and
# show what landed in Spark and what went to the backout queue.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
PY=.venv/bin/python

echo "== emptying the demo queues and tables"
rm -rf data/demo
$PY - <<'PY'
import sys; sys.path.insert(0, ".")
from tests.support.amq import AmqClient
with AmqClient() as c:
    for q in ("/queue/demo.orders", "/queue/demo.invoices", "/queue/demo.orders.backout", "/queue/demo.invoices.backout"):
        c.drain(q, quiet=0.3)
PY

echo "== putting sample messages"
$PY scripts/demo_messages.py --orders "${DEMO_ORDERS:-3000}" --invoices "${DEMO_INVOICES:-2000}"

echo "== running: mqbridge run --config config/demo.toml --until-idle 10s"
.venv/bin/mqbridge run --config config/demo.toml --until-idle 10s

echo "== what landed (read back through Spark)"
.venv/bin/mqbridge tables --config config/demo.toml

echo "== what is left on the queues"
$PY - <<'PY'
import sys; sys.path.insert(0, ".")
from tests.support.amq import AmqClient
with AmqClient() as c:
    for q in ("/queue/demo.orders", "/queue/demo.invoices", "/queue/demo.orders.backout"):
        frames = c.browse(q)
        print(f"  {q:<28} {len(frames)} messages")
        for f in frames[:5]:
            print(f"      {f.body[:30]!r}  reason: {f.headers.get('mqbridge-reason')}")
PY
