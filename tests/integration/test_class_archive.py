"""The Spark driver JVM's class-data archive on the real parts (local Spark, the shared ActiveMQ):
`mqbridge spark-archive` writes it into state_dir, private, and the next `mqbridge run` maps it
into its driver JVM and lands every message once (`mqbridge.landing.class_archive`); a bridge
without one makes it itself in the background (`mqbridge.landing.archive_maker`): stopped while it
dumps it leaves nothing behind, left to finish it installs the archive that its next start maps, an
archive the JVM refuses is removed, and a dump that fails is said once and leaves nothing."""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from mqbridge.landing.archive_maker import ArchiveMaker
from mqbridge.landing.class_archive import PREFIX, SUFFIX, archive_key, archive_path
from mqbridge.landing.session import SparkSessions
from tests.support import class_archive as shared_archive
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import read_table
from tests.support.processes import ROOT, mqbridge, output_within, run_until_said, stomp_config

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


def archive_files(state: Path) -> list[str]:
    """The archive's files in `state`: recordings, dumps and archives."""
    return sorted(p.name for p in state.iterdir() if p.name.lstrip(".").startswith(PREFIX))


def dump_jvms(state: Path) -> list[str]:
    """Command lines of `java -Xshare:dump` processes writing into `state`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if "-Xshare:dump" in line and str(state) in line:
            found.append(line)
    return found


def test_a_bridge_makes_its_own_archive_in_the_background_and_its_next_start_maps_it(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a bridge whose bulks Spark writes, with no archive in its state_dir (not the tests' shared
    # one), which makes its own a second after its driver started; and what a bridge killed while it
    # made one left there
    q = unique_queue("auto-archive")
    config = stomp_config(tmp_path, q, spark='master = "local[2]"\nwriter = "spark"\nclass_archive_after = "1s"')
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    gone = subprocess.Popen(["true"])
    gone.wait()
    left = [state / f".{PREFIX}{archive_key()}.{gone.pid}.classlist", state / f".{PREFIX}{gone.pid}{SUFFIX}.tmp"]
    for path in left:
        path.write_bytes(b"left by a bridge killed while it made an archive")
    bodies = [f"aa-{i:04d}".encode() * 10 for i in range(800)]
    amq.put_many(q, bodies[:200])
    # When the bridge is stopped while the dump runs
    making = "making the driver's class-data archive in the background"
    out = run_until_said(config, making, tmp_path / "run1.log", 300, class_archive=False)
    # Then the dump is killed and nothing of it is left, nor of the killed bridge's
    assert "the class-data archive was not finished when the bridge stopped" in out, out[-3000:]
    assert archive_files(state) == [] and dump_jvms(state) == [], (archive_files(state), dump_jvms(state))
    # When the next bridge runs until the dump is done
    amq.put_many(q, bodies[200:400])
    out = run_until_said(config, "class-data archive made in", tmp_path / "run2.log", 600, class_archive=False)
    # Then the archive is in state_dir, private, and nothing else of the dump is
    made = archive_path(state)
    assert archive_files(state) == [made.name], archive_files(state)
    assert oct(made.stat().st_mode & 0o777) == "0o600" and made.stat().st_size > 10_000_000
    # When the bridge starts again
    amq.put_many(q, bodies[400:600])
    proc = mqbridge("run", "--config", str(config), "--until-idle", "2s", class_archive=False)
    mapped = threading.Event()
    watcher = threading.Thread(target=jvm_maps, args=(proc, made, mapped), name="archive-watch", daemon=True)
    watcher.start()
    out = output_within(proc, 300, "a run with the archive the bridge made")
    watcher.join(5)
    # Then its driver JVM maps the archive, and records nothing (it has one)
    assert proc.returncode == 0, out[-4000:]
    assert mapped.is_set() and "class-data archive: mapped" in out, out[-3000:]
    assert making not in out and archive_files(state) == [made.name]
    # When the archive is one its JVM refuses (here: cut short)
    os.truncate(made, 1_000_000)
    amq.put_many(q, bodies[600:])
    proc = mqbridge("run", "--config", str(config), "--until-idle", "2s", class_archive=False)
    out = output_within(proc, 300, "a run with an archive the JVM refuses")
    # Then it is removed (the next start records again) and the bridge runs as without one
    assert proc.returncode == 0, out[-4000:]
    assert "refused the class-data archive" in out and "class-data archive: refused, removed" in out, out[-3000:]
    assert archive_files(state) == []
    # And every message landed once
    landed = collections.Counter(bytes(r.body) for r in read_table(spark, tmp_path / "landing" / "orders"))
    assert set(landed) == set(bodies) and all(n == 1 for n in landed.values()), len(landed)
    assert amq.depth(q) == 0


def test_a_dump_that_fails_is_said_once_and_leaves_nothing(tmp_path: Path, spark: Any,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    # Given a driver (the tests' own) whose class list is not one HotSpot can read
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    sessions = SparkSessions(None, spark, state_dir=state)
    sessions.class_list = state / f".{PREFIX}{archive_key()}.{os.getpid()}.classlist"
    sessions.class_list.write_text("not/a/Class\n@@ garbage\n")
    maker = ArchiveMaker(sessions, state, after=0.0, secrets=())
    # When the bridge's ticks start the dump and see it end
    caplog.set_level(logging.INFO, logger="mqbridge.landing.session")
    for _ in range(600):
        maker.on_tick(None)  # type: ignore[arg-type]
        if maker.finished:
            break
        threading.Event().wait(0.1)
    # Then it is said once, with the JVM's own words, and nothing is left
    assert maker.finished, "the dump did not end within 60 s"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "`java -Xshare:dump` exited with 1" in warnings[0], warnings
    assert "class list format error" in warnings[0] and "mqbridge spark-archive" in warnings[0], warnings
    assert archive_files(state) == [] and dump_jvms(state) == []
