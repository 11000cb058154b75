"""The swap of a rebuilt container, for every policy that rewrites one (the purge's `purger`, the
compaction's `compactor`): the work directory of one run, the journal, the marker,
`renameat2(RENAME_EXCHANGE)`, the table's history of swapped containers (which `mqbridge ledger
--verify` reads to tell files a swap removed from files that went missing), and the recovery of a
run that was killed.

A run builds the new container under `<table>/_purge/<work>/new` (readers skip `_` names) with a
`journal.json` naming the container, puts the marker `_mqbridge_purge_<work>` into it, and swaps it
with the live directory under the table's lock. `recover_purges` (at every start of `mqbridge run`,
`mqbridge purge` and `mqbridge compact`) finishes what a killed run left: marker in the live
container → the swap happened: the marker and the old files go (rolled forward); otherwise the new
container is thrown away (rolled back).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from mqbridge.errors import PurgeError
from mqbridge.landing.containers import purge_lock

log = logging.getLogger("mqbridge.purge.swap")  # the name operators configure

WORK = "_purge"
MARKER = "_mqbridge_purge_"
JOURNAL = "journal.json"
#: One JSON line per container a purge or compaction swapped or dropped, in the table directory
#: (readers skip `_` names): `mqbridge ledger --verify` tells files a swap removed from files that
#: went missing.
HISTORY = "_mqbridge_purged.jsonl"
#: A bulk is marked published just after its files are moved: a swap recorded up to this long before
#: the mark may still have been the one that rewrote or removed them.
PURGE_SLACK = 60.0


def recover_purges(table: Path) -> int:
    """Finish or roll back what killed purges left under `table` (see the module docstring);
    the number of purges found. A purge running now (another process holds the table's purge
    lock) is left alone."""
    root = table / WORK
    if not root.is_dir():
        return 0
    try:
        with purge_lock(table):
            return _recover(table, root)
    except PurgeError:
        log.info("table %s: a purge is running; its work directory is left to it", table)
        return 0


def _recover(table: Path, root: Path) -> int:
    found = 0
    for work in sorted(p for p in root.iterdir() if p.is_dir()):
        found += 1
        try:
            journal = json.loads((work / JOURNAL).read_text())
            container, strategy = table / journal["container"], str(journal.get("strategy", ""))
        except (OSError, ValueError, KeyError):
            container, strategy = None, ""  # killed before its journal was written: nothing was swapped
        marker = MARKER + work.name
        if (work / "old").is_dir():
            log.warning("purge %s of %s: the container was dropped; its files are removed now (rolled forward)",
                        work.name, container)
            if container is not None:  # killed before (or after) its record: one more does no harm
                record_purge(table, container.name, "drop")
        elif container is not None and (container / marker).exists():
            # a compaction stays one (`mqbridge ledger --verify` still counts its rows by bulk)
            record_purge(table, container.name, "compact" if strategy == "compact" else "recovered")
            (container / marker).unlink()
            log.warning("purge %s of %s: the new container was in place; old files removed (rolled forward)",
                        work.name, container)
        else:
            log.warning("purge %s of %s: killed before its swap; the new container is discarded (rolled back)",
                        work.name, container or table)
        shutil.rmtree(work, ignore_errors=True)
    with contextlib.suppress(OSError):
        root.rmdir()
    return found


def record_purge(table: Path, container: str, strategy: str) -> None:
    """Append to the table's purge history that `container` was swapped or dropped now."""
    line = json.dumps({"container": container, "strategy": strategy, "at": time.time()}) + "\n"
    with open(table / HISTORY, "a+", encoding="utf-8") as history:
        if history.tell() > 0:
            history.seek(history.tell() - 1)
            if history.read(1) != "\n":  # a line torn by a crash stays a line of its own
                line = "\n" + line
        history.write(line)
        history.flush()
        os.fsync(history.fileno())


def purge_history(table: Path) -> dict[str, float]:
    """When each container of `table` was last swapped or dropped by a purge or compaction (epoch seconds)."""
    return {container: max(at for at, _ in swaps) for container, swaps in swap_history(table).items()}


def swap_history(table: Path) -> dict[str, list[tuple[float, str]]]:
    """Each container of `table` swapped or dropped: when (epoch seconds) and by what ("compact",
    a purge's strategy, or "recovered" by a later start), in the order recorded."""
    found: dict[str, list[tuple[float, str]]] = {}
    try:
        lines = (table / HISTORY).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return found
    for line in lines:
        try:
            entry = json.loads(line)
            found.setdefault(str(entry["container"]), []).append((float(entry["at"]), str(entry["strategy"])))
        except (ValueError, KeyError, TypeError):
            continue  # a line torn by a crash
    return found


def swaps_since(history: dict[str, list[tuple[float, str]]], container: str,
                published_at: float) -> list[tuple[float, str]]:
    """The swaps of `container` (from `swap_history`) that may have rewritten or removed files of a
    bulk published at `published_at` (`PURGE_SLACK` before it included)."""
    return [(at, by) for at, by in history.get(container, []) if at >= published_at - PURGE_SLACK]


def finish(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    with contextlib.suppress(OSError):
        work.parent.rmdir()  # the table's _purge directory, once no other run uses it


def partition_dirs(table: Path) -> list[Path]:
    return [p for p in table.iterdir() if p.is_dir() and p.name.startswith("put_date=")] if table.is_dir() else []


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> None:
    """Swap two directories in one step (Linux renameat2 RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        raise PurgeError("this system has no renameat2 (Linux 3.15+, glibc 2.28+): a container cannot be "
                         "swapped atomically")
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise PurgeError(f"cannot swap {a} and {b}: {os.strerror(err)} (the file system must support "
                         "RENAME_EXCHANGE: ext4, xfs, btrfs, tmpfs)")
    fsync_dir(b.parent)


def fresh_name(path: Path) -> str:
    """A data file name no container has used: Spark's pattern, a new unique id, `path`'s suffixes."""
    return f"part-00000-{uuid.uuid4()}{''.join(path.suffixes)}"


def write_json(path: Path, data: dict[str, object]) -> None:
    path.write_text(json.dumps(data) + "\n")
    fsync(path)
    fsync_dir(path.parent)


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    if os.name != "nt":
        fsync(path)
