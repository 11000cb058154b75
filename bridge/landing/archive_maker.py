"""The bridge makes its driver's class-data archive itself while it runs (`[spark] class_archive =
"auto"`, the default; `mqbridge.landing.class_archive` says why and what an archive is).

A driver started without an archive records the classes it loads (`SparkSessions.class_list`).
`class_archive_after` after the bridge first saw the session, this observer starts a second JVM —
the driver's own `java` (its `java.home`) on the driver's class path (`java.class.path`) — that
dumps the listed classes into a static archive (`-Xshare:dump`) under a temporary name in
`state_dir`, at the lowest CPU priority, so that the bridge's own work comes first: about 40
CPU-seconds and 170 MB, once per pyspark and Java. When it is done the archive is installed (0600,
renamed into place: `class_archive.install`) and the driver's next start maps it; the running driver
is not touched. The control thread's ticks must be quick, so a tick only starts or polls that process.

The dump JVM gets the bridge's environment without its secrets (`driver_secrets.child_environment`)
and a command line of paths only. A failure is logged once, with the JVM's last words, and the bridge
goes on without an archive (`mqbridge spark-archive` makes one another way). A stop kills an
unfinished dump and removes what it wrote; lists and dumps left by a killed bridge are removed at
the next one's first look.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from mqbridge.errors import one_line
from mqbridge.landing import class_archive
from mqbridge.landing.driver_secrets import child_environment
from mqbridge.observer import BridgeView, Observer

if TYPE_CHECKING:
    from mqbridge.landing.session import SparkSessions

log = logging.getLogger("mqbridge.landing.session")  # beside the session's own lines on the archive

#: Files of other processes' recordings and dumps: `.spark-driver-<key>.<pid>.classlist`,
#: `.spark-driver-<pid>.jsa.tmp` (with its `.log`).
_LEFT_BEHIND = re.compile(r"\.spark-driver-(?:[0-9a-f]+\.)?(\d+)(?:\.classlist|\.jsa\.tmp(?:\.log)?)$")


class ArchiveMaker(Observer):
    """Starts, polls and, at a stop, kills the dump of the driver's class-data archive (module docstring)."""

    def __init__(self, sessions: SparkSessions, state_dir: Path, after: float, secrets: Collection[str]) -> None:
        self.sessions, self.state_dir, self.after, self.secrets = sessions, Path(state_dir), after, secrets
        self._seen: float | None = None  # when a tick first found a driver recording its classes
        self._dump: subprocess.Popen[bytes] | None = None
        self._dump_started = 0.0
        self._temporary = class_archive.temporary_path(self.state_dir)
        self._output = self._temporary.with_name(self._temporary.name + ".log")  # what the dump JVM says
        self.finished = False  # made, failed or stopped: nothing more to do in this process

    def on_tick(self, bridge: BridgeView) -> None:
        if self.finished:
            return
        if self._dump is not None:
            self._poll()
            return
        spark, listed = self.sessions.current, self.sessions.class_list
        if spark is None or listed is None:
            return
        now = time.monotonic()
        if self._seen is None:
            self._seen = now
            self._remove_left_behind()
        if now - self._seen >= self.after:
            self._start(spark, listed)

    def on_stopping(self, bridge: BridgeView) -> None:
        if self.finished:
            return
        self.finished = True
        dump, self._dump = self._dump, None
        if dump is not None and dump.poll() is None:
            dump.kill()
            dump.wait()
            log.info("Spark: the class-data archive was not finished when the bridge stopped; the next start "
                     "records the driver's classes again")
        self._clean_up()

    def _start(self, spark: object, listed: Path) -> None:
        try:
            system = spark._jvm.System  # type: ignore[attr-defined]
            java = Path(str(system.getProperty("java.home"))) / "bin" / ("java.exe" if os.name == "nt" else "java")
            class_path = str(system.getProperty("java.class.path"))
        except Exception as exc:  # noqa: BLE001 - the driver is gone or busy: the next tick asks again
            log.debug("Spark: the driver's java.home and class path not read yet: %s", one_line(exc))
            return
        if not listed.is_file() or listed.stat().st_size == 0:
            self._give_up(f"the driver recorded no classes in {listed}")
            return
        self._temporary.unlink(missing_ok=True)
        command = [str(java), "-Xshare:dump", f"-XX:SharedClassListFile={listed}",
                   f"-XX:SharedArchiveFile={self._temporary}", "-cp", class_path]
        try:
            with open(self._output, "wb") as output:
                self._dump = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                              stderr=subprocess.STDOUT, env=child_environment(os.environ, self.secrets))
        except OSError as exc:
            self._give_up(f"{java} could not be started: {one_line(exc)}")
            return
        self._dump_started = time.monotonic()
        _lowest_priority(self._dump.pid)
        log.info("Spark: making the driver's class-data archive in the background (a second JVM at the lowest CPU "
                 "priority dumps the %s classes the driver loaded; about 40 CPU-seconds, once)",
                 f"{_lines(listed):,}")

    def _poll(self) -> None:
        assert self._dump is not None
        code = self._dump.poll()
        if code is None:
            return
        self._dump, self.finished = None, True
        seconds = time.monotonic() - self._dump_started
        if code == 0 and self._temporary.is_file() and self._temporary.stat().st_size > 0:
            final = class_archive.install(self._temporary, self.state_dir)
            log.info("Spark: class-data archive made in %.0fs (%d MB): %s; the driver's next start maps it",
                     seconds, final.stat().st_size // 2**20, final)
        else:
            self._give_up(f"`java -Xshare:dump` exited with {code} after {seconds:.0f}s: {_last_words(self._output)}")
        self._clean_up()

    def _give_up(self, why: str) -> None:
        self.finished = True
        log.warning("Spark: no class-data archive was made (%s); the driver starts without one, and "
                    "`mqbridge spark-archive` makes one another way", why)
        self._clean_up()

    def _clean_up(self) -> None:
        for path in (self._temporary, self._output, self.sessions.class_list):
            if path is not None:
                path.unlink(missing_ok=True)

    def _remove_left_behind(self) -> None:
        """Recordings and dumps of processes that are gone (a bridge killed while it made one)."""
        for path in self.state_dir.iterdir():
            found = _LEFT_BEHIND.match(path.name)
            if found and int(found.group(1)) != os.getpid() and not psutil.pid_exists(int(found.group(1))):
                path.unlink(missing_ok=True)


def _lowest_priority(pid: int) -> None:
    """The dump JVM at the lowest CPU (and, on Linux, disk) priority: it only uses what the bridge leaves."""
    try:
        process = psutil.Process(pid)
        process.nice(getattr(psutil, "IDLE_PRIORITY_CLASS", 19) if sys.platform == "win32" else 19)
        if sys.platform.startswith("linux"):
            process.ionice(psutil.IOPRIO_CLASS_IDLE)
    except (psutil.Error, OSError) as exc:
        log.debug("Spark: the archive's dump JVM keeps its priority: %s", one_line(exc))


def _lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _last_words(output: Path) -> str:
    """The dump JVM's last line of output (its error), or a note that it said nothing."""
    try:
        lines = [line.strip() for line in output.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    return lines[-1][:300] if lines else "it printed nothing"
