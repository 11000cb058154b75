"""Another writer's newest commit of a Delta table, met with its checksum file.

Why: Delta writes a commit's checksum file (`_delta_log/<v>.crc`: the table's protocol, metadata, size and
transactions at version v) just after the commit's log entry, as part of the commit. A process that loads
the table's newest version in between gets a snapshot without it, and Delta then runs Spark jobs: the
protocol and metadata rebuilt from the log since the last checkpoint (up to 100 commits with the bridge's
`checkpointInterval`, `mqbridge.landing.delta.DEFAULT_CONF`), and, for this process's next commit, the
new version's checksum from the table's whole state. Alone on its table a bridge never meets such a
version: its own commits carry their checksum into its next snapshot. With two bridges committing to one
table, a third of the commits ran 3-4 such jobs (`bench/delta_two_writers.py`, docs/scaling.md), and
the two together committed less than one alone.

So before a transaction starts on a table another writer commits to (`shared`), `meet_newest` waits a
moment for the newest version's checksum file. A writer that writes none (delta-rs, or Delta with
`writeChecksumFile.enabled` off) would make every wait run out: after one wait ran out, a table is not
waited for again until the file that wait ran out on turns up after all (its writer was slow, not one
that writes none) or a checksum file of its newest version is found without waiting. A slow writer is
the common case on a busy host (a writer whose own commit lost a race computes its checksum from the
whole table first), and among three writers the newest version's file is rarely there at once: before,
one wait that ran out could leave a bridge rebuilding the state in every commit for good (docs/scaling.md,
"A wait that ran out once").
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

#: How long a transaction waits for the checksum file of another writer's newest version. That writer
#: writes it right after its log entry, unless it had to compute it from the table's whole state itself
#: (its own commit lost a race): then it comes seconds later on a busy host, and a shorter wait spreads
#: the rebuild to every writer. With 1 s, three bridges on one table of a 2-core host ran out of waits
#: and made 643-664 msg/s together; with 5 s none ran out and they made 4,980 (docs/scaling.md). Waiting
#: costs no CPU; the rebuild it spares costs seconds of it.
CHECKSUM_WAIT = 5.0
#: How often the file is looked for meanwhile.
POLL = 0.005

_lock = threading.Lock()
#: Table locations where this process has met another writer's commit.
_shared: set[str] = set()
#: Table locations whose last wait ran out -> the checksum file it ran out on: not waited for until that
#: file turns up or a checksum file is found at once.
_without_checksums: dict[str, Any] = {}
#: Table location -> the newest version this process committed there.
_own: dict[str, int] = {}


def committed(location: str, version: int) -> None:
    """Remember that this process committed `version` of the table at `location`."""
    if version >= 0:
        with _lock:
            _own[location] = max(version, _own.get(location, -1))


def started(location: str, read_version: int) -> None:
    """A transaction of this process started on `read_version` of the table at `location`: a version
    above this process's newest commit there was another writer's, and the table is `shared` from then on."""
    with _lock:
        own = _own.get(location)
        if own is not None and read_version > own:
            _shared.add(location)


def shared(location: str) -> bool:
    """Whether this process has met another writer's commit of the table at `location`."""
    with _lock:
        return location in _shared


def meet_newest(jvm: Any, delta_log: Any, location: str) -> int:
    """Before a transaction starts on the table of `delta_log` (at `location`): when the table is shared and
    holds versions after the snapshot this process has, wait up to `CHECKSUM_WAIT` for the newest one's
    checksum file, so that the transaction's snapshot is loaded with it (see the module docstring). A
    table only this process writes costs nothing here. The newest version found (or the snapshot's, when
    not looked for): the log holds every version up to it."""
    known = int(delta_log.unsafeVolatileSnapshot().version())
    if known < 0 or not shared(location):
        return known
    names = jvm.org.apache.spark.sql.delta.util.FileNames
    log_path = delta_log.logPath()
    fs = log_path.getFileSystem(delta_log.newDeltaHadoopConf())
    newest = known
    while fs.exists(names.unsafeDeltaFile(log_path, newest + 1)):
        newest += 1
    if newest == known:
        return newest
    checksum = names.checksumFile(log_path, newest)
    if fs.exists(checksum):
        with _lock:
            _without_checksums.pop(location, None)
        return newest
    with _lock:
        missed = _without_checksums.get(location)
    if missed is not None:
        if not fs.exists(missed):
            return newest
        with _lock:  # the writer wrote it after the wait ran out: slow, not one that writes none
            _without_checksums.pop(location, None)
    deadline = time.monotonic() + CHECKSUM_WAIT
    while not fs.exists(checksum):
        if time.monotonic() >= deadline:
            with _lock:
                _without_checksums[location] = checksum
            log.info("Delta table %s: version %d has no checksum file after %.1f s (its writer writes none?): its "
                     "snapshots are rebuilt by Spark jobs, and no further commit waits for one until that one "
                     "turns up or one is found at once",
                     location, newest, CHECKSUM_WAIT)
            return newest
        time.sleep(POLL)
    return newest
