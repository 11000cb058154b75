"""`mqbridge spark-archive`: make the in-process Spark driver JVM's class-data archive in
`state_dir` (`mqbridge.landing.class_archive`), which every later start of the driver maps.

It starts the driver JVM as `run` would (the configuration's `[spark]` settings, its secrets kept
off the command line), has it do the bridge's Spark work once — the start-up probe, a raw bulk and
a JSON bulk through the executor, into a scratch warehouse under `state_dir` that is removed after —
and lets the JVM exit normally, which writes the archive.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from mqbridge.commands.help import parser_help
from mqbridge.errors import ConfigError, SparkUnavailableError

#: Longest wait for the JVM to write the archive as it exits (tens of seconds on a busy 2-core machine).
EXIT_TIMEOUT = 600.0


def add_parser(sub: Any) -> None:
    """Add `spark-archive` to the subparsers `sub`."""
    archive = sub.add_parser("spark-archive", help="make the Spark driver JVM's class-data archive in state_dir "
                                                   "(its later starts take about half the time)",
                             **parser_help("spark-archive"))
    archive.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    archive.set_defaults(handler=cmd_spark_archive)


def cmd_spark_archive(args: argparse.Namespace) -> int:
    from mqbridge.config import TypeConfig, load_config
    from mqbridge.landing import class_archive
    from mqbridge.landing.driver_secrets import DriverSecrets
    from mqbridge.landing.executor import SparkExecutor
    from mqbridge.landing.session import create_spark_session, write_probe
    from mqbridge.logsetup import setup_logging
    from mqbridge.message import Bulk, Message
    from mqbridge.strict_modes import check_trusted, private_dir

    cfg = load_config(args.config, secrets=False)
    if cfg.spark.remote:
        raise ConfigError(f"{args.config}: [spark] remote is set: the driver JVM is the Spark Connect server's, "
                          "not the bridge's; start that server with its own options")
    cfg.require_resolved("spark")
    setup_logging("WARNING")
    state_dir = private_dir(cfg.resolve_path(cfg.bridge.state_dir))
    check_trusted(state_dir, "state_dir")
    temporary = class_archive.temporary_path(state_dir)
    temporary.unlink(missing_ok=True)
    print(f"starting Spark ({cfg.spark.shown}) to record the classes its driver loads; the archive is written "
          "as the JVM exits (tens of seconds, about 170 MB)", flush=True)
    started = time.monotonic()
    spark = create_spark_session(master=cfg.spark.master, app_name=f"{cfg.spark.app_name}-archive",
                                 conf=cfg.spark.conf, secrets=DriverSecrets.of(cfg),
                                 java_options=class_archive.dump_options(temporary))
    scratch = Path(tempfile.mkdtemp(prefix=".spark-archive-", dir=state_dir))
    try:
        write_probe(spark, scratch / "probe")
        raw = SparkExecutor(spark, scratch, "raw", TypeConfig(table="raw"))
        typed = SparkExecutor(spark, scratch, "typed", TypeConfig(table="typed", format="json",
                                                                   schema="id STRING, amount DECIMAL(12,2)"))
        for executor, body in ((raw, b"x" * 1024), (typed, b'{"id": "a", "amount": "1.50"}')):
            for _ in range(2):
                bulk = Bulk(executor.message_type)
                for i in range(200):
                    bulk.add(Message(msg_id=f"archive-{i}", body=body, source="archive", destination="/queue/archive"))
                failed = [r for r in executor.execute(bulk) if not r.ok]
                if failed:
                    raise SparkUnavailableError(f"a write of the archive's scratch bulks failed: {failed[0].reason}")
        gateway = spark.sparkContext._gateway
        proc = gateway.proc if gateway is not None else None
        spark.stop()
        if proc is None:
            raise SparkUnavailableError("the Spark driver JVM was not started by this process: no archive to write")
        class_archive.wait_for_exit(proc, EXIT_TIMEOUT)
        path = class_archive.install(temporary, state_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        temporary.unlink(missing_ok=True)
    print(f"class-data archive written: {path} ({path.stat().st_size / 1e6:.0f} MB) in "
          f"{time.monotonic() - started:.0f}s; every later start of this bridge's Spark driver maps it")
    return 0
