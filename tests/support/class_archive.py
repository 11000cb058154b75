"""The test session's class-data archive of the Spark driver JVM (`mqbridge spark-archive`, as an
operator makes it after an install), shared by the bridges the tests start.

It is kept in `.test-cache/class-archive/` of the checkout (private, ignored by git) under its key
(pyspark's version and the Java runtime): made once per checkout, and again after an upgrade. When
it is missing, the first `mqbridge run` of a pytest process starts making it, niced, on a thread of
its own (about 40 s beside the tests); every `mqbridge run`, `purge`, `compact` and `replay` started after it is
ready gets it hard-linked into its `state_dir` (`link_into`), and a test's own Spark process can map it
(`java_options`), so a driver JVM it starts maps it and starts in about half the time
(docs/performance.md). A run started before it is ready, or whose JVM refuses it (another class
path: a JDBC driver, Hive), starts as without one: the archive changes how fast a JVM starts, never
what it does. tests/integration/test_class_archive.py checks the `mqbridge spark-archive` this
process ran (`made_in_this_process`), or makes its own when the checkout had one already, and opts
out of `link_into` (`mqbridge(..., class_archive=False)`); MQBRIDGE_TEST_CLASS_ARCHIVE=off turns
it off for a whole run. Two pytest processes of one checkout make it one after the other (a lock
file beside it): the second waits for the first and uses what it made.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import tomllib

from mqbridge.landing.class_archive import PREFIX, QUIET, SUFFIX, archive_path

log = logging.getLogger(__name__)

_lock = threading.Lock()
_maker: threading.Thread | None = None
_ready: list[Path] = []  # the archive, once made
_made_elsewhere: list[Path] = []  # the archive another pytest process of the checkout made meanwhile


class Made:
    """What this process's `mqbridge spark-archive` did (tests/integration/test_class_archive.py
    checks it rather than making a second archive): its exit code and output, the state_dir it wrote
    into, and the archive of another key put there before it ran."""

    def __init__(self, state: Path, stale: Path, returncode: int, output: str) -> None:
        self.state, self.stale, self.returncode, self.output = state, stale, returncode, output


_made: list[Made] = []


def _make(root: Path, base: Path) -> None:
    """Make the archive in `base`/state (the body of the maker thread), once no other pytest
    process of the checkout is making it (`base`/lock) and unless it made it meanwhile."""
    with open(base / "lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        made = archive_path(base / "state")
        if made.is_file():
            _made_elsewhere.append(made)
            _ready.append(made)
            return
        _make_locked(root, base)


def _make_locked(root: Path, base: Path) -> None:
    """Make the archive in `base`/state over a stale archive of another key, which the command
    must remove."""
    from tests.support.processes import memory_bridge

    config = memory_bridge("archive", writer="spark").set("spark", master="local[2]").write(base / "bridge.toml")
    state = base / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    stale = state / f"{PREFIX}000000000000{SUFFIX}"
    stale.write_bytes(b"old")
    with open(base / "spark-archive.log", "wb") as out:
        done = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "mqbridge", "spark-archive",
                               "--config", str(config)],
                              cwd=root, stdout=out, stderr=subprocess.STDOUT, timeout=900, check=False)
    _made.append(Made(state, stale, done.returncode,
                      (base / "spark-archive.log").read_text(errors="replace")))
    made = archive_path(state)
    if done.returncode == 0 and made.is_file():
        _ready.append(made)
    else:  # the tests run as without it; say where to look
        log.warning("the tests' class-data archive was not made (exit %s): see %s", done.returncode,
                    base / "spark-archive.log")


def start(root: Path) -> None:
    """Use the checkout's archive, or start making it; once per process."""
    global _maker
    with _lock:
        if _maker is not None:
            return
        if os.environ.get("MQBRIDGE_TEST_CLASS_ARCHIVE") == "off":  # to compare, or to rule it out
            _maker = threading.current_thread()
            return
        base = root / ".test-cache" / "class-archive"
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        made = archive_path(base / "state")
        if made.is_file():
            _ready.append(made)
            _maker = threading.current_thread()  # nothing to make
            return
        _maker = threading.Thread(target=_make, args=(root, base), name="test-class-archive", daemon=True)
        _maker.start()


def made_in_this_process(timeout: float = 900) -> Made | None:
    """What the `mqbridge spark-archive` this process started did, once it is done; None when none
    was run (the checkout had the archive already, another pytest process made it meanwhile, or
    MQBRIDGE_TEST_CLASS_ARCHIVE=off)."""
    maker = _maker
    if maker is None or maker.name != "test-class-archive":
        return None
    maker.join(timeout)
    assert not maker.is_alive(), f"the tests' `mqbridge spark-archive` did not finish within {timeout:.0f}s"
    if _made_elsewhere:  # another pytest process of the checkout made it while this one waited
        return None
    assert _made, "the tests' `mqbridge spark-archive` thread ended without a result (see the log above)"
    return _made[0]


def link_into(config: Path) -> None:
    """Hard-link the archive, if it is ready, into the `state_dir` of the configuration `config`
    (created 0700 as the bridge would); a configuration that does not parse is left alone (tests
    of bad configurations)."""
    if not _ready:
        return
    try:
        bridge = tomllib.loads(config.read_text()).get("bridge", {})
        state = Path(os.path.expanduser(str(bridge.get("state_dir", "state"))))
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        return
    if not state.is_absolute():
        state = config.absolute().parent / state
    target = state / _ready[0].name
    try:
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not target.exists():
            os.link(_ready[0], target)
    except OSError as exc:  # another filesystem, a read-only state_dir under test...
        log.debug("no class-data archive for %s: %s", config, exc)


def java_options() -> str:
    """The driver option that maps the archive, once it is ready, for a Spark process a test starts
    itself (`spark.driver.extraJavaOptions`); "" before."""
    return f"-XX:SharedArchiveFile={_ready[0]} {QUIET}" if _ready else ""
