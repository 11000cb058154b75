#!/usr/bin/env bash
# The demo: set up, start the bridge on a local ActiveMQ (in the background, monitoring on
# http://127.0.0.1:9464), put sample messages, wait until both queues are drained, and show what
# landed in Spark, what went to the backout queue, and the operator's view (`mqbridge status`).
# The bridge keeps running so that you can open its status page; DEMO_STOP=1 stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
PY=.venv/bin/python
PIDFILE=data/demo.pid
CONFIG=config/demo.toml

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "== stopping the bridge of an earlier demo (pid $(cat "$PIDFILE"))"
    kill -TERM "$(cat "$PIDFILE")"
    for _ in $(seq 1 120); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.5; done
fi

echo "== emptying the demo queues and tables"
rm -rf data/demo
mkdir -p data/demo
$PY - <<'PY'
import sys; sys.path.insert(0, ".")
from tests.support.amq import AmqClient
with AmqClient() as c:
    for q in ("/queue/demo.orders", "/queue/demo.invoices", "/queue/demo.orders.backout", "/queue/demo.invoices.backout"):
        c.drain(q, quiet=0.3)
PY

echo "== starting: mqbridge run --config $CONFIG (in the background; its log: data/demo/bridge.log)"
nohup .venv/bin/mqbridge run --config "$CONFIG" >data/demo/bridge.log 2>&1 &
echo $! >"$PIDFILE"
for _ in $(seq 1 240); do
    if .venv/bin/mqbridge status --config "$CONFIG" >/dev/null 2>&1; then break; fi
    kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { echo "the bridge ended:"; tail -30 data/demo/bridge.log; exit 1; }
    sleep 0.5
done

echo "== putting sample messages"
$PY scripts/demo_messages.py --orders "${DEMO_ORDERS:-3000}" --invoices "${DEMO_INVOICES:-2000}"

echo "== waiting until both queues are drained (every message landed, or moved to the backout queue)"
$PY - <<'PY'
import sys, time; sys.path.insert(0, ".")
from tests.support.amq import AmqClient
deadline = time.monotonic() + 600
with AmqClient() as c:
    while True:
        left = {q: c.depth(q) for q in ("/queue/demo.orders", "/queue/demo.invoices")}
        if not any(left.values()):
            break
        if time.monotonic() > deadline:
            sys.exit(f"the queues were not drained within 10 minutes: {left}; see data/demo/bridge.log")
        time.sleep(1)
PY

echo "== what landed: the Delta tables as their logs describe them (mqbridge tables)"
.venv/bin/mqbridge tables --config "$CONFIG"
echo "== and read back (delta-rs, another reader than the bridge's Spark): the first orders"
$PY - <<'PY'
from deltalake import DeltaTable
rows = DeltaTable("data/demo/landing/orders").to_pyarrow_table(columns=["order_id", "customer", "amount", "currency"])
print(f"  {rows.num_rows} rows")
for row in rows.sort_by("order_id").slice(0, 3).to_pylist():
    print("  ", row)
PY

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

echo "== the operator's view: mqbridge status --config $CONFIG"
.venv/bin/mqbridge status --config "$CONFIG" || true
if [ "${DEMO_STOP:-0}" = 1 ]; then
    echo "== stopping the bridge (SIGTERM: it finishes what it holds first)"
    kill -TERM "$(cat "$PIDFILE")"
    for _ in $(seq 1 120); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.5; done
    rm -f "$PIDFILE"
else
    echo "== the bridge keeps running: status page http://127.0.0.1:9464/ (also /metrics, /status, /healthz)"
    echo "   stop it with: kill $(cat "$PIDFILE")    (the broker: scripts/activemq.sh stop)"
fi
