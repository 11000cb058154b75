"""`mqbridge spark-archive` on the real parts (local Spark, the shared ActiveMQ): it writes the driver
JVM's class-data archive into state_dir, private, and the next `mqbridge run` maps it into its
driver JVM and lands every message once (`mqbridge.landing.class_archive`)."""

from __future__ import annotations

import collections
import os
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from mqbridge.landing.class_archive import PREFIX, SUFFIX
from tests.support import class_archive as shared_archive
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import read_table
from tests.support.processes import ROOT, mqbridge, stomp_config

pytestmark = pytest.mark.integration


def jvm_maps(proc: Any, archive: Path, seen: threading.Event) -> None:
    """Until `proc` exits: set `seen` once a `java` child of it has `archive` mapped."""
    parent = psutil.Process(proc.pid)
    while proc.poll() is None and not seen.is_set():
        try:
            for child in parent.children(recursive=True):
                if "java" in child.name() and any(m.path == str(archive) for m in child.memory_maps()):
                    seen.set()
        except psutil.Error:
            pass
        seen.wait(0.2)


def make_archive(tmp_path: Path) -> tuple[Path, Path, int, str]:
    """`mqbridge spark-archive` over a stale archive of another pyspark or Java in state_dir: the
    state_dir, the stale archive, the exit code and the output. The run the tests' shared archive
    came from when this pytest process made it (`tests.support.class_archive`: one 40-90 s dump
    per session, not two), else a run of its own in `tmp_path`."""
    shared_archive.start(ROOT)
    made = shared_archive.made_in_this_process()
    if made is not None:
        return made.state, made.stale, made.returncode, made.output
    config = stomp_config(tmp_path / "maker", "q", spark='master = "local[2]"\nwriter = "spark"')
    state = tmp_path / "maker" / "state"
    state.mkdir(mode=0o700)
    stale = state / f"{PREFIX}000000000000{SUFFIX}"
    stale.write_bytes(b"old")
    proc = mqbridge("spark-archive", "--config", str(config))
    out, _ = proc.communicate(timeout=600)
    return state, stale, proc.returncode, out


def test_the_archive_is_written_private_and_the_next_run_maps_it(tmp_path: Path, spark: Any,
                                                                  amq: AmqClient) -> None:
    # Given a bridge's state_dir holding an archive of another pyspark or Java
    # When the operator makes the archive
    made_in, stale, returncode, out = make_archive(tmp_path)
    # Then it is in state_dir, 0600, the stale one and the scratch files are gone
    assert returncode == 0, out[-4000:]
    archives = sorted(made_in.glob(f"{PREFIX}*{SUFFIX}"))
    assert len(archives) == 1 and archives[0] != stale, (archives, out[-2000:])
    made = archives[0]
    assert oct(made.stat().st_mode & 0o777) == "0o600" and made.stat().st_size > 10_000_000
    assert sorted(p.name for p in made_in.iterdir() if p != made) == [], list(made_in.iterdir())
    assert f"class-data archive written: {made}" in out
    # (the bridge below, whose bulks Spark writes, gets that archive in its own state_dir)
    q = unique_queue("archive")
    config = stomp_config(tmp_path, q, spark='master = "local[2]"\nwriter = "spark"')
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    archive = state / made.name
    os.link(made, archive)
    # And when the bridge then runs on 300 messages
    bodies = [f"ca-{i:04d}".encode() * 10 for i in range(300)]
    amq.put_many(q, bodies)
    proc = mqbridge("run", "--config", str(config), "--until-idle", "2s", class_archive=False)
    mapped = threading.Event()
    watcher = threading.Thread(target=jvm_maps, args=(proc, archive, mapped), name="archive-watch", daemon=True)
    watcher.start()
    out, _ = proc.communicate(timeout=300)
    watcher.join(5)
    # Then its driver JVM mapped the archive, said nothing about it, and every message landed once
    assert proc.returncode == 0, out[-4000:]
    assert mapped.is_set(), f"no java child of the bridge mapped {archive}; output: {out[-3000:]}"
    assert "class-data archive: mapped" in out, out[-3000:]
    assert "cds" not in out.lower(), out[-3000:]
    landed = collections.Counter(bytes(r.body) for r in read_table(spark, tmp_path / "landing" / "orders"))
    assert set(landed) == set(bodies) and all(n == 1 for n in landed.values())
    assert amq.depth(q) == 0


def test_spark_connect_has_no_archive_of_the_bridge(tmp_path: Path) -> None:
    # Given a bridge configured for a Spark Connect server
    config = stomp_config(tmp_path, "q", spark='remote = "sc://127.0.0.1:1"')
    # When the operator asks for an archive
    made = mqbridge("spark-archive", "--config", str(config))
    out, _ = made.communicate(timeout=120)
    # Then it is a configuration error naming why, and nothing was started or written
    assert made.returncode == 2, out
    assert "remote is set" in out and "Connect server" in out
    assert not (tmp_path / "state").exists() or not any(os.scandir(tmp_path / "state"))
