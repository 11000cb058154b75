"""Start-up latency as an operator sees it: `mqbridge run --until-idle` (the real CLI) on a queue of
an ActiveMQ on 127.0.0.1 holding N messages put before it starts.

    .venv/bin/python bench/start_latency.py --writer auto --messages 100 --runs 3

Per run: seconds from the process's start to its first listener's subscription log line
("connected to ..., consuming ..."), and to its exit once every message is committed and it has been
idle for `--idle`; whether a Spark driver JVM (a `java` child process) ever ran; the rows landed.
`--writer auto` (pyarrow writes the raw bulks: nothing needs Spark) or `spark` (Spark writes every bulk).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import stomp

ROOT = Path(__file__).resolve().parent.parent
SUBSCRIBED = "consuming "  # the STOMP listener's line once its subscription is confirmed


def put(port: int, queue: str, n: int) -> None:
    """Put `n` persistent 1 KB messages; the broker has them all once it receipts the last."""
    conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    done = threading.Event()

    class Receipts(stomp.ConnectionListener):  # type: ignore[misc]
        def on_receipt(self, frame: stomp.utils.Frame) -> None:
            done.set()

    conn.set_listener("r", Receipts())
    conn.connect(wait=True)
    body = b"x" * 1024
    for i in range(n):
        headers = {"persistent": "true", **({"receipt": "last"} if i == n - 1 else {})}
        conn.send(queue, body, headers=headers)
    if n and not done.wait(60):
        raise TimeoutError("no receipt for the last message put")
    conn.disconnect()


def config(workdir: Path, queue: str, port: int, writer: str) -> Path:
    path = workdir / "bridge.toml"
    path.write_text(f"""
[bridge]
name = "startlat"
control_interval = "1s"
plugin_dirs = []
state_dir = "state"
[monitoring]
listen = ""
[spark]
master = "local[2]"
warehouse = "landing"
writer = "{writer}"
[types.orders]
bulk_size = "128KB"
bulk_timeout = "500ms"
[sources.amq]
kind = "stomp"
port = {port}
[[listeners]]
source = "amq"
queue = "{queue}"
threads = 2
batch = 200
wait = "200ms"
message_type = "orders"
backout_queue = "{queue}.backout"
""")
    return path


def rows(table: Path) -> int:
    if not table.is_dir():
        return 0
    files = [p for p in table.rglob("*.parquet") if not any(part.startswith("_") for part in p.parts)]
    return ds.dataset(files, format="parquet").count_rows() if files else 0


def one_run(port: int, writer: str, messages: int, idle: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="startlat-") as tmp:
        workdir = Path(tmp)
        queue = f"/queue/startlat-{uuid.uuid4().hex[:8]}"
        put(port, queue, messages)
        path = config(workdir, queue, port, writer)
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "mqbridge", "run", "--config", str(path), "--until-idle",
                                 idle], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        subscribed: list[float] = []
        jvm = threading.Event()
        output: list[str] = []

        def watch_children() -> None:
            parent = psutil.Process(proc.pid)
            while proc.poll() is None:
                try:
                    if any("java" in child.name() for child in parent.children(recursive=True)):
                        jvm.set()
                        return
                except psutil.Error:
                    pass
                time.sleep(0.1)

        watcher = threading.Thread(target=watch_children, daemon=True)
        watcher.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            if not subscribed and SUBSCRIBED in line:
                subscribed.append(time.perf_counter() - start)
        code = proc.wait()
        ended = time.perf_counter() - start
        if code != 0:
            print("".join(output[-40:]), file=sys.stderr)
            raise SystemExit(f"mqbridge run exited {code}")
        return {"subscribed": subscribed[0] if subscribed else float("nan"), "exit": ended,
                "jvm": float(jvm.is_set()), "rows": float(rows(workdir / "landing" / "orders"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writer", choices=["auto", "arrow", "spark"], default="auto")
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", default="2s", help="mqbridge run --until-idle")
    parser.add_argument("--port", type=int, default=61613)
    args = parser.parse_args()
    results = []
    for n in range(1, args.runs + 1):
        r = one_run(args.port, args.writer, args.messages, args.idle)
        results.append(r)
        print(f"run {n}: writer={args.writer} subscribed after {r['subscribed']:.2f}s, exit after {r['exit']:.2f}s, "
              f"JVM started: {'yes' if r['jvm'] else 'no'}, rows landed {r['rows']:.0f}/{args.messages}", flush=True)
    print(f"median: subscribed {statistics.median(r['subscribed'] for r in results):.2f}s, "
          f"exit {statistics.median(r['exit'] for r in results):.2f}s")


if __name__ == "__main__":
    main()
