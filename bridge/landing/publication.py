"""Staged files, their publication into a table, and start-up recovery (filesystem only).

A bulk is written by Spark under `staging_dir(table_path, owner, bulk_id)`, which is
`<table>/_staging/<owner>/<bulk_id>`: Spark and every Parquet reader skip directories whose name
starts with an underscore, so nothing there is visible. The executor then lists the files
(`staged_moves`), records them in the ledger (`Ledger.prepare`), moves them into the table
(`publish`) and records the bulk as published (`Ledger.mark_published`).

Atomicity. Each file is moved with one `os.replace` (a rename on the same file system), so a
reader sees a file entirely or not at all. A bulk of one file (one put_date, under the executor's
128 MB per file) therefore becomes visible in one rename. A bulk of several files becomes visible
file by file: between the first and the last rename a reader may see part of it; a crash in that
window leaves the bulk prepared, and the next start rolls it forward (`recover`). Final names are
deterministic (`part-<bulk_id>-<n>.parquet`), so doing a move twice is harmless.

Durability. `publish` fsyncs each staged file before renaming it (Spark does not) and each target
directory after, so a published file's name and content survive a power loss.

After `Ledger.prepare` the bulk must be published, never backed out: if `publish` fails, the
caller stops (a `FatalError`) and recovery rolls it forward at the next start. Backing the
messages out instead would land them again, and the prepared bulk later too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mqbridge.errors import LedgerError, PublicationError, StagingMismatchError, StuckBulkError
from mqbridge.landing.containers import table_lock
from mqbridge.landing.ledger import Ledger, PreparedBulk, owner_alive, this_host
from mqbridge.landing.tables import record_landing
from mqbridge.strict_modes import private_dir

log = logging.getLogger(__name__)

STAGING = "_staging"
#: Spark's FileOutputCommitter working directory.
TEMPORARY = "_temporary"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_BULK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: A published file's name (`staged_moves`): the bulk it belongs to, and its number.
_PUBLISHED_NAME = re.compile(r"part-(?P<bulk>[A-Za-z0-9][A-Za-z0-9._-]*)-\d{5}\.parquet")


def owner_dirname(owner: str) -> str:
    """`owner` ("host:pid:create_time") as a directory name: "host_pid_create_time", any other
    unsafe character replaced by "-" (recovery reads the pid and create time back from it)."""
    return "_".join(_UNSAFE.sub("-", part) for part in owner.rsplit(":", 2))


def _dirname_parts(name: str) -> tuple[str, str] | None:
    """(host as written in a directory name, "pid:create_time") of an `owner_dirname`, or None."""
    parts = name.rsplit("_", 2)
    return (parts[0], f"{parts[1]}:{parts[2]}") if len(parts) == 3 else None


def _local_owner(dirname: str, host: str) -> str | None:
    """The owner of a staging directory named by `owner_dirname` if its pid can be judged here
    (this host and pid namespace `host`, or this host name from before pid namespaces were
    recorded), else None."""
    parts = _dirname_parts(dirname)
    if parts is None:
        return None
    for candidate in (host, socket.gethostname()):
        if parts[0] == _UNSAFE.sub("-", candidate):
            return f"{candidate}:{parts[1]}"
    return None


def staging_dir(table_path: Path, owner: str, bulk_id: str) -> Path:
    """Where Spark writes `bulk_id` of `owner` for the table at `table_path`."""
    if not _BULK_ID.fullmatch(bulk_id):
        raise ValueError(f"{bulk_id!r} cannot be a file name (letters, digits, . _ -)")
    return Path(table_path) / STAGING / owner_dirname(owner) / bulk_id


def private_staging(staging: Path) -> None:
    """Create `<table>/_staging/<owner>` above a bulk's `staging` directory 0700, whatever the umask
    (the table's own directory as the umask says: readers need it): no other local user can read a
    staged file or swap it before it is published.

    Tried again when a directory on the way vanished meanwhile: a write that landed no rows into a
    table that did not exist removes the table's directories it left empty (`rmdir`, see
    `SparkExecutor`), possibly between this call's two `mkdir`s."""
    for attempt in range(3):
        try:
            private_dir(Path(staging).parents[1])
            private_dir(Path(staging).parent)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise


def staged_moves(table_path: Path, staging: Path, bulk_id: str) -> list[tuple[str, str]]:
    """Every Parquet part file Spark committed under `staging`, paired with its final path
    `<table_path>/<partition dirs>/part-<bulk_id>-<n>.parquet` (n: 00000, 00001... in the order
    of the staged paths, so the same staging gives the same names). Skips `_SUCCESS`, `.crc` files
    and anything under `_temporary` (uncommitted task output)."""
    staging, table_path = Path(staging).absolute(), Path(table_path).absolute()
    found = sorted(
        path for path in staging.rglob("part-*.parquet")
        if path.is_file() and not any(part.startswith(("_", ".")) for part in path.relative_to(staging).parts))
    moves = []
    for n, path in enumerate(found):
        partition = path.parent.relative_to(staging)
        moves.append((str(path), str(table_path / partition / f"part-{bulk_id}-{n:05d}.parquet")))
    return moves


def verify_staged(moves: Sequence[tuple[str, str]], rows: int, staging: Path, *, what: str) -> None:
    """Check, before anything is recorded or published, that the staged files of `moves` hold
    exactly `rows` rows, by their Parquet footers (no data is read). Raises StagingMismatchError,
    an outage, naming what was expected and what was found: nothing staged at all means Spark
    wrote where this process does not see (another file system, a Spark Connect server or
    cluster without the shared warehouse path, `fs.defaultFS` elsewhere), or a cleaner removed it."""
    found = 0
    try:
        for staged, _final in moves:
            found += pq.read_metadata(staged).num_rows
    except (OSError, pa.ArrowException) as exc:
        raise StagingMismatchError(f"{what}: a staged file under {staging} cannot be read back "
                                   f"({' '.join(str(exc).split())})") from exc
    if found != rows or (rows and not moves):
        where = (f"no Parquet file under {staging}" if not moves
                 else f"{found} rows in {len(moves)} files under {staging}")
        raise StagingMismatchError(
            f"{what}: expected {rows} rows staged, found {where}; nothing was published or committed. "
            "Spark does not write where this bridge reads: the warehouse must be the same directory for "
            "Spark (a Connect server, a cluster's executors) and the bridge, with no fs.defaultFS elsewhere")


def publish(moves: Sequence[tuple[str, str]]) -> None:
    """Move each staged file to its final path. A move whose source is gone and whose target
    exists was done before (idempotent). Raises PublicationError, before moving anything, if a
    source and its target are both missing."""
    lost = [staged for staged, final in moves if not os.path.exists(staged) and not os.path.exists(final)]
    if lost:
        raise PublicationError(f"{len(lost)} staged files are gone and not published: {', '.join(lost[:3])}")
    directories: set[str] = set()
    # A purge swaps a container directory under the same lock: no file lands in a container
    # between the purge's last look at it and the swap (mqbridge.purge.purger).
    with contextlib.ExitStack() as locks:
        for table in sorted({os.path.dirname(os.path.dirname(final)) for _, final in moves}):
            locks.enter_context(table_lock(Path(table)))
        record_landing(moves)  # the tables' markers name the types before their rows are visible
        for staged, final in moves:
            if not os.path.exists(staged):
                continue  # moved before a crash (the target exists: checked above)
            target_dir = os.path.dirname(final)
            os.makedirs(target_dir, exist_ok=True)
            _fsync(staged)  # content on disk before the name is: Spark does not fsync its files
            os.replace(staged, final)
            directories.add(target_dir)
    for directory in sorted(directories):
        _fsync(directory)


def published_bulk_of(name: str) -> str | None:
    """The bulk a published file belongs to, by its name (`part-<bulk_id>-<n>.parquet`, as
    `staged_moves` names it); None for another name (a compaction's or purge's new file)."""
    match = _PUBLISHED_NAME.fullmatch(os.path.basename(name))
    return match["bulk"] if match else None


def unpublished_bulks(table: Path, names: Iterable[str]) -> list[str]:
    """Of the data files `names` of a container of `table`, the bulks that may not be recorded as
    published yet: a purge or a compaction must leave such a file where it is, under its name, or the
    bulk's owner (or the recovery that finishes it) can no longer publish it: it would find neither
    its staged file nor its published one (`roll_forward`).

    Told by the file system, whichever ledger (another `state_dir` on this warehouse) holds the bulk:
    a bulk's staging directory `<table>/_staging/<owner>/<bulk_id>` exists from its write until
    after the bulk is recorded published (or rolled back), by its process, by the recovery that
    finishes a dead process's bulks, or by `mqbridge ledger --abandon`. A published file is named
    after its bulk (`published_bulk_of`). An owner's staging this process may not list (another
    user's) makes every bulk of the container count."""
    wanted = {bulk for name in names if (bulk := published_bulk_of(name)) is not None}
    staging = Path(table) / STAGING
    if not wanted or not staging.is_dir():
        return []
    found: set[str] = set()
    for owner in staging.iterdir():
        try:
            bulks = {p.name for p in owner.iterdir()} if owner.is_dir() else set()
        except FileNotFoundError:
            continue  # removed meanwhile: its bulks are finished
        except OSError as exc:
            log.warning("cannot list %s (%s): every bulk with files in the container counts as not published yet",
                        owner, exc.strerror)
            return sorted(wanted)
        found |= bulks & wanted
    return sorted(found)


def discard(staging: Path) -> None:
    """Remove a staging directory and everything in it (Spark's `_temporary` included)."""
    shutil.rmtree(staging, ignore_errors=True)
    parent = Path(staging).parent
    # The owner's directory goes too once empty, so that stopped processes leave nothing behind.
    if parent.name != STAGING and parent.parent.name == STAGING:
        with contextlib.suppress(OSError):
            parent.rmdir()


def _fsync(path: str) -> None:
    # Directories cannot be opened for fsync on Windows; NTFS journals renames itself.
    if os.name == "nt" and os.path.isdir(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class RecoveryReport:
    """What `recover` did; `stuck`: the dead owners' bulks it could not roll forward (their files
    are gone), left prepared for an operator (`mqbridge.landing.stuck`)."""

    rolled_forward: int = 0
    rolled_back: int = 0
    stale_dirs_removed: int = 0
    skipped_live: int = 0
    #: Dead owners' bulks of tables that commit by transaction (Delta Lake), which only the table can
    #: decide, with Spark (`BulksInDoubt.settle_dead`, once Spark is up; `mqbridge.landing.delta.settle`).
    transactional: list[PreparedBulk] = field(default_factory=list)
    stuck: list[StuckBulkError] = field(default_factory=list)


def recover(ledger: Ledger, table_paths: Iterable[Path], *, warehouse: Path) -> RecoveryReport:
    """Finish what dead processes left: run at start-up, before any listener.

    Every prepared bulk whose owner is dead is rolled forward (its remaining files published, the
    bulk marked published): it had all its files staged when it was prepared. It is rolled back
    instead (staged files removed, bulk forgotten) when another bulk published one of its
    identities meanwhile and none of its own files was moved yet. A bulk that can be neither (a
    staged file is gone and was never published) is left prepared, its staging directory with it,
    and reported in `stuck`: what is safe depends on whether its rows are in the table, which an
    operator has `mqbridge ledger --abandon` find out. Then the staging directories of dead owners
    of this host that this ledger knows (`Ledger.knows_owner`: a bridge with another ledger on the
    same warehouse recovers its own) and Spark's `_temporary` directories directly under each table
    are removed. Bulks and directories of live owners (another bridge on this state_dir) are left.

    Raises LedgerError when a dead bulk names a path outside its table under `warehouse`
    (`check_bulk_paths`).
    """
    report = RecoveryReport()
    kept: set[str] = set()  # the staging directories of stuck bulks
    for bulk in ledger.in_progress():
        if ledger.owner_alive(bulk.owner):
            report.skipped_live += 1
            continue
        if bulk.transaction is not None:
            report.transactional.append(bulk)
            continue
        try:
            if roll_forward(ledger, bulk, warehouse):
                report.rolled_forward += 1
            else:
                report.rolled_back += 1
        except StuckBulkError as exc:
            report.stuck.append(exc)
            kept.add(os.path.abspath(staging_dir(Path(warehouse) / bulk.table, bulk.owner, bulk.bulk_id)))
    host = this_host()
    for table_path in table_paths:
        staging_root = Path(table_path) / STAGING
        if staging_root.is_dir():
            for owner_dir in sorted(staging_root.iterdir()):
                owner = _local_owner(owner_dir.name, host)
                if owner is None or owner_alive(owner) or not ledger.knows_owner(owner):
                    # Another host's or pid namespace's (its pids mean nothing here: its bulks are
                    # finished once its lease expires, see Landing.published), a live process's,
                    # another ledger's, or not ours to judge.
                    continue
                _remove_except(owner_dir, kept)
                report.stale_dirs_removed += 1
        temporary = Path(table_path) / TEMPORARY
        if temporary.is_dir():
            shutil.rmtree(temporary, ignore_errors=True)
            report.stale_dirs_removed += 1
    log.info("ledger recovery: %d bulks rolled forward, %d rolled back, %d stale directories removed, "
             "%d bulks of live processes left alone, %d stuck (files gone)", report.rolled_forward,
             report.rolled_back, report.stale_dirs_removed, report.skipped_live, len(report.stuck))
    return report


def _remove_except(owner_dir: Path, kept: set[str]) -> None:
    """Remove a dead owner's staging directory, but for the bulk directories in `kept` (absolute)."""
    if not any(os.path.dirname(k) == os.path.abspath(owner_dir) for k in kept):
        shutil.rmtree(owner_dir, ignore_errors=True)
        return
    for child in owner_dir.iterdir():
        if os.path.abspath(child) not in kept:
            shutil.rmtree(child, ignore_errors=True)


def roll_forward(ledger: Ledger, bulk: PreparedBulk, warehouse: Path) -> bool:
    """Finish a dead owner's prepared bulk: publish its remaining files and mark it published
    (True); or, when another bulk published one of its identities meanwhile and none of its own
    files was moved yet, remove its staged files and forget it (False). Idempotent.

    Raises StuckBulkError (nothing is touched) when a staged file is gone and was never published
    (`gone_files`), and LedgerError when the bulk names a path outside its table under `warehouse`
    (`check_bulk_paths`: nothing is touched)."""
    if bulk.transaction is not None:
        raise ValueError(f"bulk {bulk.bulk_id} commits by its table's transaction: the table decides it, not files")
    check_bulk_paths(bulk, warehouse)
    untouched = all(os.path.exists(staged) for staged, _ in bulk.files)
    if untouched and ledger.published(ledger.identities_of(bulk.bulk_id)):
        for staged, _ in bulk.files:
            _remove(staged)
        ledger.forget(bulk.bulk_id)
        log.warning("bulk %s of %s rolled back: another bulk published some of its messages first",
                    bulk.bulk_id, bulk.owner)
        return False
    try:
        gone = gone_files(bulk)
        if gone:
            raise PublicationError(f"{len(gone)} of its {len(bulk.files)} staged files are gone and were never "
                                   f"published: {', '.join(gone[:3])}")
        publish(bulk.files)
    except PublicationError as exc:
        raise StuckBulkError(f"prepared bulk {bulk.bulk_id} of table {bulk.table} cannot be rolled forward: {exc} "
                             f"(its process {bulk.owner} is gone)", bulk.bulk_id, bulk.table) from exc
    ledger.mark_published(bulk.bulk_id)
    return True


def gone_files(bulk: PreparedBulk) -> list[str]:
    """The staged files of `bulk` that are gone and whose published copy does not exist either."""
    return [staged for staged, final in bulk.files if not os.path.exists(staged) and not os.path.exists(final)]


def check_bulk_paths(bulk: PreparedBulk, warehouse: Path) -> None:
    """Raise LedgerError unless every move of `bulk` stays inside its own table under `warehouse`:
    from `<table>/_staging/...` to `<table>/<partitions>/part-<bulk_id>-<n>.parquet`, no `..`, no
    hidden or `_` directory as a target. The ledger is data: whoever wrote a path into it must not
    make recovery rename or remove files anywhere else. Such a bulk is left as it is, and so are
    its files."""
    root = os.path.abspath(warehouse)
    table = os.path.normpath(os.path.join(root, bulk.table))
    final_name = re.compile(rf"part-{re.escape(bulk.bulk_id)}-\d+\.parquet")
    for staged, final in bulk.files:
        # Compared as written, `..` resolved: a path through a symbolic link in the warehouse is the
        # warehouse's business; one that climbs out of it by name is not.
        staged, final = os.path.normpath(staged), os.path.normpath(final)
        problem = None
        if not _BULK_ID.fullmatch(bulk.bulk_id) or not _inside(table, root):
            problem = f"its table {bulk.table!r} is not a directory of the warehouse {warehouse}"
        elif not os.path.isabs(staged) or not _inside(staged, os.path.join(table, STAGING)):
            problem = f"staged file {staged!r} is not under {os.path.join(table, STAGING)}"
        elif (not os.path.isabs(final) or not _inside(final, table) or not final_name.fullmatch(os.path.basename(final))
              or any(part.startswith(("_", ".")) for part in os.path.relpath(final, table).split(os.sep))):
            problem = f"target {final!r} is not a part file of bulk {bulk.bulk_id} in {table}"
        if problem:
            raise LedgerError(f"prepared bulk {bulk.bulk_id} of {bulk.owner} names a path outside the warehouse's "
                              f"tables: {problem}; it is left alone, its files untouched (a ledger that names "
                              "such paths was written by something other than mqbridge: inspect it)")


def _inside(path: str, directory: str) -> bool:
    """`path` is below `directory` (both normalised)."""
    return path.startswith(directory.rstrip(os.sep) + os.sep)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
