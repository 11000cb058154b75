"""The in-process driver JVM's class-data archive (HotSpot's CDS), kept in `state_dir`.

A Spark driver JVM loads and verifies some 15,000 classes before its first write. An archive of
them, mapped at the next start (`-XX:SharedArchiveFile`), skips most of that work: measured on the
2-core machine, SparkSession start 6.4-7.4 s -> 3.9-4.5 s and the first 2,000-row write 3.8-4.7 s ->
1.8-2.2 s (three runs each, alternated; docs/performance.md).

Two ways make one:
- **The bridge itself** (`[spark] class_archive = "auto"`, the default): a driver started without an
  archive records the classes it loads (`-XX:DumpLoadedClassList`, a list written as they load), and
  a while after it started (`class_archive_after`) the bridge has a second JVM dump the classes of
  that list from the driver's own class path into a static archive (`-Xshare:dump`), in the
  background at the lowest CPU priority (`mqbridge.landing.archive_maker`). Nothing of the running
  driver changes; the next start maps the archive.
- **`mqbridge spark-archive`**, on an operator's command (after an install or an upgrade): one JVM
  runs the bridge's Spark work and then exits normally, dumping a dynamic archive
  (`-XX:ArchiveClassesAtExit`); that exit takes tens of seconds, which is why a bridge's stop,
  which must be quick, never does it.

An archive the JVM refuses (its class path or Java changed since it was made) leaves the driver
without class sharing at all; the session's start checks for that (`refused`) and removes the
archive, so that the next start records again.

The archive holds code the JVM loads, so it lives in `state_dir` (private to the bridge's user,
checked at start) and is written 0600 under a temporary name, then renamed. Its name carries a key
of pyspark's version and the Java runtime (`archive_path`): after an upgrade of either, the old
archive is not used (HotSpot would refuse it with a warning anyway) and the next one made removes it.
Only an in-process driver has one: a Spark Connect server or a cluster's executors are other JVMs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from mqbridge.errors import SparkUnavailableError

log = logging.getLogger(__name__)

#: Archive files are `<state_dir>/spark-driver-<key>.jsa`.
PREFIX, SUFFIX = "spark-driver-", ".jsa"
#: HotSpot's own notes while it dumps (classes it skips: signed JARs, old class versions) say
#: nothing an operator can act on.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    """The `java` pyspark starts (JAVA_HOME's, else the first on PATH), its links resolved."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


def archive_key() -> str:
    """12 hex digits of pyspark's version and the Java runtime's path and modification time."""
    import pyspark

    java = _java()
    stamp = f"{pyspark.__version__}|{java}|{java.stat().st_mtime_ns if java else ''}"
    return hashlib.sha256(stamp.encode()).hexdigest()[:12]


def archive_path(state_dir: Path) -> Path:
    return Path(state_dir) / f"{PREFIX}{archive_key()}{SUFFIX}"


def java_options(state_dir: Path | None) -> str:
    """The driver's option that maps the archive of `state_dir`, or "" when there is none."""
    if state_dir is None:
        return ""
    path = archive_path(state_dir)
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path.is_file() else ""


def class_list_path(state_dir: Path) -> Path:
    """Where this process's driver records the classes it loads (one list per process: two
    processes of one `state_dir`, a bridge and a command, must not write one file)."""
    return Path(state_dir) / f".{PREFIX}{archive_key()}.{os.getpid()}.classlist"


def record_options(class_list: Path) -> str:
    """The driver's option that writes the name of each class it loads to `class_list`, as it loads it."""
    return f"-XX:DumpLoadedClassList={class_list}"


def refused(spark: Any) -> bool:
    """Whether the in-process driver of `spark` runs without class sharing: HotSpot refused the
    archive it was given (its class path or Java changed since it was made) and then shares nothing,
    not even the JDK's own archive, which it shares otherwise (`java.vm.info` says "sharing")."""
    return "sharing" not in str(spark._jvm.System.getProperty("java.vm.info"))


def dump_options(temporary: Path) -> str:
    """The driver's options that write the archive to `temporary` when the JVM exits."""
    return f"-XX:ArchiveClassesAtExit={temporary} {QUIET}"


def temporary_path(state_dir: Path) -> Path:
    return Path(state_dir) / f".{PREFIX}{os.getpid()}{SUFFIX}.tmp"


def install(temporary: Path, state_dir: Path) -> Path:
    """Make the archive the JVM wrote to `temporary` the one of `state_dir` (0600, renamed into
    place), and remove archives of other keys. SparkUnavailableError when the JVM wrote none."""
    if not temporary.is_file() or temporary.stat().st_size == 0:
        raise SparkUnavailableError(f"the driver JVM wrote no class-data archive to {temporary} (it did not exit "
                                    "normally, or this Java cannot write dynamic archives: Java 13 or later is needed)")
    final = archive_path(state_dir)
    os.chmod(temporary, 0o600)
    os.replace(temporary, final)
    for old in Path(state_dir).glob(f"{PREFIX}*{SUFFIX}"):
        if old != final:
            old.unlink(missing_ok=True)
            log.info("removed the class-data archive of another pyspark or Java: %s", old)
    return final


def wait_for_exit(proc: object, timeout: float) -> None:
    """Let the driver JVM `proc` (pyspark's gateway process, which exits once its standard input
    closes) exit and write its archive; SparkUnavailableError past `timeout` seconds."""
    import subprocess

    assert isinstance(proc, subprocess.Popen)
    if proc.stdin is not None:
        proc.stdin.close()
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() >= deadline:
            raise SparkUnavailableError(f"the driver JVM did not exit within {timeout:.0f}s while writing its archive")
        time.sleep(0.2)
