"""Helpers for the ledger and publication tests: owners that are dead, and Spark-like staging."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.configs import orders


def dead_owner() -> str:
    """An owner of this host whose process is not running: a pid that is not in use."""
    pid = 4_000_000  # above Linux's pid_max ceiling (4194304 is the largest pid_max; start below and look)
    while psutil.pid_exists(pid):
        pid += 1
    return f"{socket.gethostname()}:{pid}:1000.00"


def restarted_owner() -> str:
    """An owner of this host whose pid is running now but started at another time (pid reuse)."""
    return f"{socket.gethostname()}:{os.getpid()}:1000.00"


def stage_like_spark(staging: Path, files_per_date: dict[str, int], rows_per_file: int = 1) -> list[Path]:
    """Write what `df.write.partitionBy("put_date").parquet(staging)` leaves after a job commit:
    part files per put_date directory (real Parquet, `rows_per_file` rows each: publication checks
    their footers), their .crc files and _SUCCESS."""
    written = []
    for put_date, count in files_per_date.items():
        directory = staging / f"put_date={put_date}"
        directory.mkdir(parents=True, exist_ok=True)
        for n in range(count):
            name = f"part-{n:05d}-{uuid.uuid4()}.c000.snappy.parquet"
            rows = pa.table({"body": [f"{put_date} {n} {r}".encode() for r in range(rows_per_file)]})
            pq.write_table(rows, directory / name)
            (directory / f".{name}.crc").write_bytes(b"crc")
            written.append(directory / name)
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "_SUCCESS").write_bytes(b"")
    return written


def ledger_config(tmp_path: Path) -> Path:
    """The orders configuration with `state_dir = "state"`, written to tmp_path/bridge.toml."""
    return orders().set("bridge", state_dir="state").write(tmp_path / "bridge.toml")


def parquet_of_rows(path: Path, rows: int) -> None:
    """A real Parquet file of `rows` rows at `path` (its footer is what `mqbridge ledger --verify` counts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"body": [f"row-{n}" for n in range(rows)]}), path)
