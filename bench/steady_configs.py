"""The bridge configurations the steady-state benchmark (`bench/steady.py`) runs: the tuned one its
flags describe, and the README's quick-start configuration (`--quick-start`), nothing tuned."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.references import Broker
from bench.s3_warehouse import s3_warehouse

ROOT = Path(__file__).resolve().parent.parent


def quick_start_toml(workdir: Path, broker: Broker, destination: str, port: int, args: argparse.Namespace) -> Path:
    """The README's quick-start configuration (only the keys it shows, every tuning key at its default:
    threads unset, so adaptive), with a monitoring port for the benchmark to read."""
    path = workdir / "bridge.toml"
    path.write_text(f"""
[bridge]
state_dir = "state"
[monitoring]
listen = "127.0.0.1:{port}"
[spark]
warehouse = "landing"
{f'table_format = "{args.table_format}"{chr(10)}jars_dir = "{ROOT / "jars"}"' if args.table_format != "parquet" else ""}
[types.bench]
[sources.src]
{broker.source_toml()}
[[listeners]]
source = "src"
queue = "{destination}"
message_type = "bench"
backout_queue = "{destination}.backout"
{f'identity = "{args.identity}"' if args.identity != "auto" else ""}
{f"threads_max = {args.threads_max}" if args.threads_max else ""}
{chr(10).join(args.listener_key)}
""")
    return path


def bridge_toml(workdir: Path, broker: Broker, destination: str, port: int, args: argparse.Namespace) -> Path:
    if args.quick_start:
        return quick_start_toml(workdir, broker, destination, port, args)
    path = workdir / "bridge.toml"
    warehouse, store_conf = s3_warehouse(workdir) if args.s3 else (str(workdir / "landing"), {})
    conf = {**store_conf, **dict(item.split("=", 1) for item in args.spark_conf)}
    path.write_text(f"""
[bridge]
control_interval = "1s"
plugin_dirs = []
state_dir = "state"
[monitoring]
listen = "127.0.0.1:{port}"
[spark]
{f'remote = "{args.remote}"' if args.remote else f'master = "{args.master or "local[2]"}"'}
warehouse = "{warehouse}"
writer = "{args.writer}"
table_format = "{args.table_format}"
jars_dir = "{ROOT / 'jars'}"
[spark.conf]
{chr(10).join(f'"{k}" = "{v}"' for k, v in conf.items())}
[collector]
memory = "{args.collector_memory}"
workers = 2
writes_per_type = {args.writes_per_type}
[types.bench]
bulk_size = "{args.bulk_size}"
bulk_timeout = "2s"
{f'latency = "{args.type_latency}"' if args.type_latency else ""}
[sources.src]
{broker.source_toml()}
[[listeners]]
source = "src"
queue = "{destination}"
threads = {args.threads}
batch = {args.batch}
in_flight = {args.in_flight}
{f"prefetch = {args.prefetch}" if args.prefetch else ""}
wait = "200ms"
message_type = "bench"
backout_queue = "{destination}.backout"
identity = "{args.identity}"
""")
    return path
