"""The landing protocol of one process: stage → ledger prepared → publish → ledger published.

The executor's Parquet writer (`mqbridge.landing.writes.parquet`) writes a bulk's files into its staging
directory (`mqbridge.landing.publication.staging_dir`) and hands them to `Landing.land`, which records the bulk as
prepared in the ledger, moves its files into the table and records it as published. Only then does
the executor report success, and only then does the listener commit at the source. A message the
ledger shows as published is committed without landing again (the listener asks `published`).

Failures:

* before `prepare` (Spark's write, a duplicate identity another process published meanwhile): the
  staged files are removed and the exception propagates; the executor reports the bulk retryable.
* after `prepare`: the bulk must never be given back, or its messages would land twice (once when
  redelivered, once when the next start rolls the prepared bulk forward). So `land` keeps trying
  to publish, with capped backoff, for as long as the process lives; a process that dies meanwhile
  is rolled forward by `recover` at its next start.

A table that commits by its own transaction (Delta Lake, `mqbridge.landing.delta`) takes `commit`
instead: nothing is staged; the bulk is prepared with its transaction id, then written once as
one commit carrying it, and a dead process's prepared bulk is decided by asking the table rather
than by its files.

Bulks these steps cannot finish (a dead process's, one whose `prepare` or write left its outcome
unknown) are decided by `mqbridge.landing.in_doubt`, which `Landing.in_doubt` holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mqbridge import failpoints
from mqbridge.config import TypeConfig
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.counters import Counters
from mqbridge.errors import BulkFencedError, LedgerUnavailableError, StuckBulkError, one_line
from mqbridge.landing.in_doubt import BulksInDoubt
from mqbridge.landing.ledger import Ledger, PreparedBulk, TableTransaction, Versions, app_id
from mqbridge.landing.publication import (
    discard,
    publish,
    staged_moves,
    verify_staged,
)
from mqbridge.landing.stuck import advice
from mqbridge.landing.tables import table_regex
from mqbridge.observer import BridgeView, Observer

log = logging.getLogger(__name__)


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event

#: Longest pause between two attempts to publish a prepared bulk.
PUBLISH_RETRY_MAX = 30.0
#: How long a listener waits for a live process's prepared bulk holding its messages to be
#: published before it gives its unit back (and asks again on redelivery).
CLAIM_WAIT = 10.0
#: How often the ledger is asked meanwhile.
CLAIM_POLL = 0.2
#: How often the ledger is pruned of identities older than `[bridge] dedupe_window`.
PRUNE_EVERY = 3600.0


@dataclass
class Landing(Observer):
    """The ledger of this process and the steps of the protocol (see the module docstring).

    As an observer of the bridge it prunes the ledger once an hour, on a thread of its own (a
    prune of an hour of traffic takes minutes, in short batches the landings interleave with; the
    control thread must not wait for it), and publishes its size.

    A published bulk's staging directory (Spark's `_SUCCESS`, checksums, empty partition
    directories) is removed by one background thread, off the path between the Spark write and the
    source commit (about 20 ms a bulk); `close` waits for it. Directories a killed process left are
    removed by `recover` at the next start.
    """

    ledger: Ledger
    owner: str
    counters: Counters
    dedupe_window: float
    warehouse: Path | ObjectStoreUri  # recovery touches only paths of its tables (publication.check_bulk_paths)
    config_path: str = ""  # the configuration file, named in the command given for a stuck bulk
    #: Rebuilds a ledger created at this start from the tables (`rebuild`; Delta, Iceberg): the identities learnt.
    pending_rebuild: Callable[[], int] | None = None
    _versions: Versions = field(default_factory=Versions)
    #: Set unless the ledger is being rebuilt from the tables (`await_rebuild`): until then no message
    #: is answered for.
    _rebuilt: threading.Event = field(default_factory=lambda: _set(threading.Event()))
    _rebuilding: threading.Lock = field(default_factory=threading.Lock)
    _stuck: dict[str, StuckBulkError] = field(default_factory=dict)  # by bulk id (`hold`)
    _stop: threading.Event = field(default_factory=threading.Event)
    #: The bulks this process must decide outside these steps (`mqbridge.landing.in_doubt`); its `settle`
    #: and `rolled_back` are given by the composition root (they need Spark).
    in_doubt: BulksInDoubt = field(init=False)
    _next_prune: float = 0.0
    _pruner: threading.Thread | None = None
    _janitor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="mqbridge-staging-cleanup"))

    def __post_init__(self) -> None:
        self.in_doubt = BulksInDoubt(self.ledger, self.owner, self.counters, self.warehouse, self.config_path)

    def published(self, identities: Sequence[str]) -> set[str]:
        """Which of these identities are already in the table (their messages must not land again).

        A message can come back while the bulk that holds it is still only *prepared*:

        * its process died after (or while) moving the files into the table, and the broker gave
          the message to another bridge sharing this ledger. That bulk is rolled forward here, as
          the next start of its own process would, and its identities count as landed.
        * its process is alive (or seems so: on another host until its lease expires) and is
          publishing it. Its messages are not answered for until that bulk is published (then they
          are landed) or its owner is found dead (then it is rolled forward here): this waits up to
          CLAIM_WAIT, then raises LedgerUnavailableError, and the unit goes back uncounted to be
          asked again. Answering "not landed" instead would land them twice.
        """
        if not self._rebuilt.is_set():
            self.rebuild_pending()  # the warm-up's attempt failed or is not done: one listener tries it
        if not self._rebuilt.is_set():
            raise LedgerUnavailableError("the ledger is being rebuilt from the tables (it was created at this "
                                         "start while tables exist): messages wait until it knows what they hold")
        start = time.perf_counter()
        found = self.ledger.published(identities)
        self.counters.observe("ledger_lookup_seconds", time.perf_counter() - start)
        rest = [i for i in identities if i not in found]
        deadline = time.monotonic() + CLAIM_WAIT
        while rest:
            claims, landed = self.in_doubt.claims_on(rest)
            found |= landed
            rest = [i for i in rest if i not in found]
            if not claims or not rest:
                break
            if time.monotonic() >= deadline or self._stop.is_set():
                claim = claims[0]
                raise LedgerUnavailableError(
                    f"{len(rest)} of these messages are in bulk {claim.bulk_id}, prepared "
                    f"{time.time() - claim.prepared_at:.0f}s ago by {claim.owner}, which is alive or within its "
                    "lease: given back until that bulk is published or its owner's lease expires")
            self._stop.wait(CLAIM_POLL)
        return found

    def await_rebuild(self) -> None:
        """Answer for no message until `rebuild` has run: the ledger was created at this start, and
        the tables may hold messages it does not know yet."""
        self._rebuilt.clear()

    def rebuild_pending(self) -> None:
        """Run `pending_rebuild` (`mqbridge.landing.delta_ledger.rebuild`, with Spark) unless it ran or
        is running, then answer for messages again. An error is logged and leaves the ledger waiting:
        the next listener that asks tries again (by the Spark warm-up first, then by `published`)."""
        learn = self.pending_rebuild
        if self._rebuilt.is_set() or learn is None or not self._rebuilding.acquire(blocking=False):
            return
        try:
            if not self._rebuilt.is_set():
                learnt = learn()
                log.warning("ledger rebuilt from the tables: %d identities of messages already landed", learnt)
                self._rebuilt.set()
        except Exception as exc:
            log.error("the ledger cannot be rebuilt from the tables now (messages wait; tried again as they "
                      "come): %s", exc)
        finally:
            self._rebuilding.release()

    def delta_duties(self) -> None:
        """What a start does once Spark is up for tables that commit by transaction: the ledger's
        rebuild (`rebuild_pending`), then deciding dead processes' prepared bulks (`settle_dead`).
        Never raises: what cannot be done now is done as the messages concerned come back."""
        self.rebuild_pending()
        try:
            self.in_doubt.settle_dead()
        except Exception as exc:
            log.warning("prepared bulks of processes that are gone wait to be decided by their tables: %s", exc)

    def hold(self, stuck: Iterable[StuckBulkError], types: Mapping[str, TypeConfig]) -> dict[str, str]:
        """Keep the bulks start-up recovery could not roll forward (`RecoveryReport.stuck`), so that
        the sinks of their tables refuse their probes (`stuck_in`) until an operator has decided;
        the reason to give, with the command, by each type whose table (a template: any rendering)
        is one of theirs: the caller makes those sinks unavailable. The other types land on."""
        waiting: dict[str, str] = {}
        for error in stuck:
            self._stuck[error.bulk_id] = error
            names = sorted(n for n, t in types.items() if table_regex(t.table or n, n).fullmatch(error.table))
            reason = advice(error, self.config_path, f"the sinks of table {error.table} ({', '.join(names) or 'none'}) "
                                                     "wait, their listeners paused; every other table lands")
            if not names:  # otherwise the sinks' breakers log it as they open
                log.critical("%s", reason)
            for name in names:
                waiting.setdefault(name, reason)
        return waiting

    def stuck_in(self, table: str, message_type: str) -> StuckBulkError | None:
        """A bulk held by `hold` that is still prepared, of a table that `table` (the type's table
        or template) renders to for `message_type`; None when there is none (those an operator has
        decided about meanwhile are let go here)."""
        for bulk_id, error in list(self._stuck.items()):
            state = self.ledger.state_of(bulk_id)
            if state != "prepared":
                self._stuck.pop(bulk_id, None)
                log.warning("bulk %s is no longer stuck (%s): table %s lands again", bulk_id,
                            state or "forgotten", error.table)
                continue
            if table_regex(table, message_type).fullmatch(error.table):
                return error
        return None

    def landed_in(self, identities: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(bulk id, table) of each of these identities that is landed (for producers' results)."""
        return self.ledger.landed_in(identities)

    def land(self, bulk_id: str, table: str, table_path: Path, staging: Path, identities: Sequence[str]) -> None:
        """Publish the files Spark staged for `bulk_id` into `table_path`, exactly once: one row per
        identity (distinct), which the staged files' footers must hold before anything is recorded
        (StagingMismatchError, an outage, otherwise)."""
        failpoints.hit("after_stage")
        start = time.perf_counter()
        moves = staged_moves(table_path, staging, bulk_id)
        try:
            verify_staged(moves, len(identities), staging, what=f"bulk {bulk_id} of table {table}")
            self.ledger.prepare(bulk_id, table, moves, identities)
        except BaseException as exc:
            if isinstance(exc, LedgerUnavailableError):  # recorded or not: none of its files will be published
                self.in_doubt.prepare_lost(bulk_id, transactional=False)
            discard(staging)
            raise
        failpoints.hit("after_prepare")
        failpoints.wait("holding_prepared")  # tests only: another bridge meets the claim meanwhile
        self._until_published(bulk_id, table, lambda: publish(moves), transactional=False)
        self.counters.observe("ledger_land_seconds", time.perf_counter() - start, table=table)
        self._janitor.submit(discard, staging)

    def transaction(self, table: str) -> TableTransaction:
        """This process's next transaction of `table` (its app id, the table's next version), which
        `commit` prepares a bulk with. A writer may draw it before the table's turn when the order of the
        versions is not the table's to check (Iceberg: an append staged before its turn carries it,
        `mqbridge.landing.writes.iceberg`); Delta's must be drawn in the turn, where they commit in order."""
        return TableTransaction(app_id(self.owner), self._versions.next(table),
                                check_fence=self.ledger.shared_across_hosts)

    def commit(self, bulk_id: str, table: str, identities: Sequence[str],
               write: Callable[[TableTransaction], None], transaction: TableTransaction | None = None) -> None:
        """Land `bulk_id` into a table that commits by its own transaction (Delta Lake, Iceberg), exactly once:
        the bulk is prepared with its transaction (`transaction`, drawn now unless the caller drew it
        before), then `write` writes its rows, one row per identity, as one commit carrying that transaction.
        No file is staged by the bridge: the table's log, not a file, says whether the bulk landed. The
        caller holds the table's lock: versions drawn in the turn commit in order.

        A write that fails is decided at once by the table (`settle`: the version fenced, so that a
        write of it still under way, on a Spark Connect server, is skipped; then looked for): committed
        after all, the bulk is recorded published and this returns; not committed, the bulk is
        forgotten and the write's exception propagates, so that the executor gives the messages back
        as it would for a Parquet table (an outage, or a bulk to triage for a poison message). When the
        table cannot even be asked (the store unreachable, refusing the credentials), the bulk stays
        prepared and SinkOutageError propagates: the messages go back to their queue, and when they
        come again `published` asks the table once more before anything lands."""
        failpoints.hit("after_stage")
        start = time.perf_counter()
        transaction = transaction or self.transaction(table)
        prepared_at = time.time()
        try:
            self.ledger.prepare(bulk_id, table, (), identities, transaction=transaction)
        except LedgerUnavailableError:  # recorded or not: its write never ran, the table decides
            self.in_doubt.prepare_lost(bulk_id, transactional=True)
            raise
        failpoints.hit("after_prepare")
        failpoints.wait("holding_prepared")  # tests only: another bridge meets the claim meanwhile
        try:
            write(transaction)
        except Exception as exc:
            self.in_doubt.decide_failed(PreparedBulk(bulk_id, table, (), self.owner, prepared_at, len(identities),
                                             transaction), exc)
            return
        self._until_published(bulk_id, table, lambda: None, transactional=True)
        self.counters.observe("ledger_land_seconds", time.perf_counter() - start, table=table)

    def _until_published(self, bulk_id: str, table: str, step: Callable[[], None], *, transactional: bool) -> None:
        """Run `step` (the publication or the commit of a prepared bulk) until it succeeds, then record
        the bulk published. A disk, Spark or ledger error after `prepare` never gives the bulk back
        (see the module docstring): tried again with capped backoff for as long as the process lives,
        except a transaction's at shutdown, which propagates: the next start asks its table whether
        it committed."""
        delay = 0.5
        while True:
            try:
                step()
                failpoints.hit("after_publish")
                self.ledger.mark_published(bulk_id, owner=self.owner)
                return
            except BulkFencedError:  # taken over by another process, which decides it
                self.counters.inc("ledger_bulks_fenced")
                raise
            except Exception as exc:
                if self._decided_elsewhere(bulk_id, table, exc):
                    return
                self.counters.inc("ledger_publish_retries")
                log.error("bulk %s of table %s is prepared but could not be %s (retrying in %.0fs; a restart %s): %s",
                          bulk_id, table, "committed" if transactional else "published", delay,
                          "asks the table whether it committed" if transactional else "rolls it forward", exc)
                if self._stop.wait(delay) and transactional:
                    raise
                delay = min(delay * 2, PUBLISH_RETRY_MAX)

    def _decided_elsewhere(self, bulk_id: str, table: str, exc: Exception) -> bool:
        """After a failed attempt to publish this process's prepared `bulk_id`: whether another process
        decided it meanwhile, because this one stalled or was cut off past its lease (or an operator
        abandoned it). Published by that process: True, the bulk landed once. Forgotten (its files
        removed, its table's version fenced): BulkFencedError, never tried again, since a publication
        now would land its messages a second time. Still prepared, or the ledger not answering: False."""
        try:
            state = self.ledger.state_of(bulk_id)
        except LedgerUnavailableError:
            return False
        if state == "published":
            log.warning("bulk %s of table %s was published by another process while this one could not (%s)",
                        bulk_id, table, one_line(exc))
            return True
        if state is None:
            self.counters.inc("ledger_bulks_fenced")
            raise BulkFencedError(f"bulk {bulk_id} of table {table} was decided by another process while this one "
                                  f"could not publish it ({one_line(exc)}): its owner's lease had expired, or an "
                                  "operator abandoned it; its messages go back to their queue") from exc
        return False

    def probe(self) -> None:
        """The ledger's part of a sink's probe: one write transaction (LedgerUnavailableError if
        the ledger cannot take one now). A sink whose ledger cannot be written is down."""
        self.ledger.probe_write()

    def close(self) -> None:
        self._stop.set()
        self._janitor.shutdown(wait=True)
        if self._pruner is not None:
            self._pruner.join()  # stops after its current batch (`_stop`)
        self.in_doubt.close()
        self.ledger.close()

    # -- observer ------------------------------------------------------------------------------
    def on_tick(self, bridge: BridgeView) -> None:
        self.ledger.heartbeat()
        now = time.monotonic()
        if now >= self._next_prune and not (self._pruner and self._pruner.is_alive()):
            self._next_prune = now + PRUNE_EVERY
            self._pruner = threading.Thread(target=self._prune, name="mqbridge-ledger-prune", daemon=True)
            self._pruner.start()
        self.in_doubt.tick()
        stats = self.ledger.stats()
        self.counters.set("ledger_bytes", stats.file_bytes)
        self.counters.set("ledger_identities", stats.identities)
        self.counters.set("ledger_prune_runs", stats.prune_runs)

    def _prune(self) -> None:
        """The body of the prune thread: one `Ledger.prune`, an error logged (the next is in an hour)."""
        try:
            removed = self.ledger.prune(self.dedupe_window, stop=self._stop)
        except LedgerUnavailableError as exc:
            log.warning("ledger: prune stopped (tried again in %.0fs): %s", PRUNE_EVERY, exc)
            return
        except Exception:
            log.exception("ledger: prune failed (tried again in %.0fs)", PRUNE_EVERY)
            return
        if removed:
            log.info("ledger: pruned %d identities older than %.0fs", removed, self.dedupe_window)

    def status_fields(self) -> dict[str, object]:
        stats = self.ledger.stats()
        return {"ledger": {"path": str(stats.path), "identities": stats.identities, "bytes": stats.file_bytes,
                           "bulks": dict(stats.bulks), "oldest": stats.oldest}}
