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
one commit carrying it, and a dead process's prepared bulk is decided by asking the table
(`settle`, given by the composition root, as it needs Spark) rather than by its files.
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
from mqbridge.errors import BulkFencedError, LedgerUnavailableError, SinkOutageError, StuckBulkError, one_line
from mqbridge.landing.ledger import Ledger, PreparedBulk, TableTransaction, Versions, app_id
from mqbridge.landing.publication import (
    discard,
    publish,
    roll_forward,
    staged_moves,
    staging_dir,
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
#: How often a control tick asks the ledger about this process's bulks whose prepare's outcome is unknown.
UNKNOWN_EVERY = 2.0
#: How long `close` waits for that question to end.
UNKNOWN_JOIN = 10.0


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
    #: Decides a dead process's prepared bulk of a table that commits by transaction (True: its rows
    #: are in the table), `mqbridge.landing.delta.settle` with a Spark session; None: none such tables.
    settle: Callable[[PreparedBulk], bool] | None = None
    #: How `settle` undid a bulk that never committed, by its table's format (`TableFormat.rolled_back`).
    rolled_back: Callable[[PreparedBulk], str] | None = None
    #: Rebuilds a ledger created at this start from the tables (`rebuild`; Delta, Iceberg): the identities learnt.
    pending_rebuild: Callable[[], int] | None = None
    _versions: Versions = field(default_factory=Versions)
    #: Set unless the ledger is being rebuilt from the tables (`await_rebuild`): until then no message
    #: is answered for.
    _rebuilt: threading.Event = field(default_factory=lambda: _set(threading.Event()))
    _rebuilding: threading.Lock = field(default_factory=threading.Lock)
    _stuck: dict[str, StuckBulkError] = field(default_factory=dict)  # by bulk id (`hold`)
    #: This process's prepared bulks whose write failed while their table could not be asked (`commit`),
    #: or whose `prepare` may have been recorded (`_unknown`).
    _undecided: set[str] = field(default_factory=set)
    #: This process's bulks whose `prepare` raised LedgerUnavailableError, by id: True for a table that
    #: commits by transaction. The ledger may hold them prepared all the same (its connection lost at the
    #: COMMIT, which the server carried out: tests/integration/test_ledger_lost_commit.py), and no other
    #: process decides a live owner's bulk, so this one must: nothing of them was published (`decide_unknown`).
    #: Also the bulks of dead processes it takes over to decide (`_settle`), for the same reason.
    _unknown: dict[str, bool] = field(default_factory=dict)
    _next_unknown: float = 0.0
    _unknown_decider: threading.Thread | None = None
    _unknown_failed: str = ""  # why the last `decide_unknown` failed (`_decide_unknown_quietly`)
    _stop: threading.Event = field(default_factory=threading.Event)
    _recovering: threading.Lock = field(default_factory=threading.Lock)
    _next_prune: float = 0.0
    _pruner: threading.Thread | None = None
    _janitor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="mqbridge-staging-cleanup"))

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
            with self._recovering:
                claims = [bulk for bulk in self.ledger.prepared_holding(rest) if not self._finish_if_dead(bulk)]
                found |= self.ledger.published(rest)
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

    def _finish_if_dead(self, bulk: PreparedBulk) -> bool:
        """Roll forward (or back) a prepared bulk whose owner is dead, or one of this process's whose
        table could not be asked after its write failed (`commit`); False if it is in flight."""
        if bulk.owner == self.owner and bulk.bulk_id in self._undecided:
            decided = self._settle(bulk)
            self._undecided.discard(bulk.bulk_id)
            self._unknown.pop(bulk.bulk_id, None)
            return decided
        if bulk.owner == self.owner and bulk.bulk_id in self._unknown:
            self._forget_unpublished(bulk)
            return True
        if bulk.owner == self.owner or self.ledger.owner_alive(bulk.owner):
            return False
        if bulk.transaction is not None:
            return self._settle(bulk)
        if not isinstance(self.warehouse, Path):  # an object store holds only tables that commit by transaction
            raise LedgerUnavailableError(f"bulk {bulk.bulk_id} of a process that is gone is prepared with files "
                                         f"for table {bulk.table}, not in this bridge's warehouse {self.warehouse}")
        try:
            rolled = roll_forward(self.ledger, bulk, self.warehouse)
        except StuckBulkError as exc:  # what is safe needs an operator: this listener halts, the others run
            waiting = "this listener halts; start it again (`mqbridge listener start`) once that is done"
            raise StuckBulkError(advice(exc, self.config_path, waiting), exc.bulk_id, exc.table) from exc
        if rolled:
            log.warning("bulk %s of a process that is gone was rolled forward: its messages "
                        "came back to this bridge", bulk.bulk_id)
            self.counters.inc("recovery_rolled_forward")
        if bulk.files:  # <table>/put_date=…/part-…: the staging dir is under <table>
            discard(staging_dir(Path(bulk.files[0][1]).parents[1], bulk.owner, bulk.bulk_id))
        return True

    def _forget_unpublished(self, bulk: PreparedBulk) -> None:
        """Forget this process's prepared `bulk`, whose `prepare` it was told had failed: its staged files
        were removed then, and none was ever moved into the table."""
        if self.ledger.forget(bulk.bulk_id, owner=self.owner):
            log.warning("bulk %s of table %s was recorded prepared although the ledger's answer was lost (its "
                        "connection dropped at the commit): forgotten, none of its files was published; its "
                        "messages land as they come again", bulk.bulk_id, bulk.table)
            self.counters.inc("recovery_rolled_back")
        self._unknown.pop(bulk.bulk_id, None)

    def decide_unknown(self) -> None:
        """Decide this process's bulks whose `prepare` raised, or that it took over (`_unknown`), and that
        the ledger holds prepared by it, without waiting for their messages to come back: until then no
        process would land those messages (the owner is alive). A bulk the ledger does not hold prepared
        by this process was not recorded (or not taken over), or was decided since.
        LedgerUnavailableError (the ledger, or a transaction's table, cannot be asked now): left for the
        next call."""
        if not self._unknown:
            return
        with self._recovering:
            prepared = {bulk.bulk_id: bulk for bulk in self.ledger.in_progress() if bulk.owner == self.owner}
            for bulk_id in list(self._unknown):
                bulk = prepared.get(bulk_id)
                if bulk is None:
                    self._unknown.pop(bulk_id, None)
                    self._undecided.discard(bulk_id)
                else:
                    self._finish_if_dead(bulk)

    def _decide_unknown_quietly(self) -> None:
        """The body of the thread `on_tick` starts for `decide_unknown`: an error is logged, at WARNING
        when it differs from the last one (tried again at every tick: a store's outage would otherwise
        log every few seconds)."""
        try:
            self.decide_unknown()
        except Exception as exc:
            why = one_line(exc)
            level = logging.DEBUG if why == self._unknown_failed else logging.WARNING
            self._unknown_failed = why
            log.log(level, "bulks this process must decide itself (a prepare whose answer was lost, or a dead "
                           "process's bulk it took over) wait to be decided (tried again in %.0fs): %s",
                    UNKNOWN_EVERY, why)
        else:
            self._unknown_failed = ""

    def _settle(self, bulk: PreparedBulk) -> bool:
        """Decide a dead process's prepared bulk of a table that commits by transaction (`settle`);
        True once decided. Raises LedgerUnavailableError (the unit goes back, to be asked again)
        while the table cannot be asked."""
        if self.settle is None:
            raise LedgerUnavailableError(f"bulk {bulk.bulk_id} of a process that is gone is prepared for table "
                                         f"{bulk.table}, which commits by transaction; this bridge has no table "
                                         "of that format configured to ask whether it committed")
        if bulk.owner != self.owner:
            # Taken over first: its owner, if it only stalled, can then never record it published after
            # the fence below (`Ledger.mark_published`); until decided, it is this process's to decide,
            # at a control tick too (`decide_unknown`): its messages may go to bridges that leave a live
            # owner's bulk alone. So from before the take-over, whose answer may be lost while the ledger
            # carried it out (tests/integration/test_ledger_lost_commit.py); a bulk this process does not
            # own is dropped from both at the next tick.
            self._undecided.add(bulk.bulk_id)
            self._unknown[bulk.bulk_id] = True
            if not self.ledger.take_over(bulk.bulk_id):
                self._undecided.discard(bulk.bulk_id)
                self._unknown.pop(bulk.bulk_id, None)
                return True  # decided meanwhile by another process
        try:
            landed = self.settle(bulk)
        except Exception as exc:
            raise LedgerUnavailableError(f"bulk {bulk.bulk_id} of a process that is gone is prepared for table "
                                         f"{bulk.table}; its table cannot be asked whether it committed now: "
                                         f"{exc}") from exc
        self._undecided.discard(bulk.bulk_id)
        self._unknown.pop(bulk.bulk_id, None)
        if landed:
            log.warning("bulk %s of a process that is gone had committed into table %s: recorded published",
                        bulk.bulk_id, bulk.table)
            self.counters.inc("recovery_rolled_forward")
        else:
            how = self.rolled_back(bulk) if self.rolled_back is not None else "fenced and rolled back"
            log.warning("bulk %s of a process that is gone never committed into table %s: %s, its messages land "
                        "as they come again", bulk.bulk_id, bulk.table, how)
            self.counters.inc("recovery_rolled_back")
        return True

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
            self.settle_dead()
        except Exception as exc:
            log.warning("prepared bulks of processes that are gone wait to be decided by their tables: %s", exc)

    def settle_dead(self) -> int:
        """Decide every prepared bulk of a dead process whose table commits by transaction (start-up
        recovery leaves them, `RecoveryReport.transactional`: the table decides, with Spark); run once
        Spark is up. The number decided; LedgerUnavailableError when a table cannot be asked now."""
        decided = 0
        for bulk in self.ledger.in_progress():
            if bulk.transaction is None or bulk.owner == self.owner or self.ledger.owner_alive(bulk.owner):
                continue
            with self._recovering:
                if self.ledger.state_of(bulk.bulk_id) == "prepared":  # not decided by a listener meanwhile
                    decided += self._settle(bulk)
        return decided

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
                self._unknown[bulk_id] = False
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
            self._unknown[bulk_id] = True
            self._undecided.add(bulk_id)
            raise
        failpoints.hit("after_prepare")
        failpoints.wait("holding_prepared")  # tests only: another bridge meets the claim meanwhile
        try:
            write(transaction)
        except Exception as exc:
            self._decide_failed(PreparedBulk(bulk_id, table, (), self.owner, prepared_at, len(identities),
                                             transaction), exc)
            return
        self._until_published(bulk_id, table, lambda: None, transactional=True)
        self.counters.observe("ledger_land_seconds", time.perf_counter() - start, table=table)

    def _decide_failed(self, bulk: PreparedBulk, exc: Exception) -> None:
        """After `commit`'s write of `bulk` raised `exc`: ask the table (see `commit`)."""
        if self.settle is None:  # no table to ask (a caller without Spark): the next start asks it
            raise exc
        with self._recovering:
            try:
                landed = self.settle(bulk)
            except Exception as why:
                self._undecided.add(bulk.bulk_id)
                raise SinkOutageError(f"bulk {bulk.bulk_id} of table {bulk.table} failed ({one_line(exc)}) and its "
                                      f"table cannot be asked whether it committed ({one_line(why)}): its messages "
                                      "go back to their queue and land once the table answers") from exc
        if not landed:
            raise exc
        failpoints.hit("after_publish")
        log.warning("bulk %s of table %s committed although its write failed (%s): recorded published",
                    bulk.bulk_id, bulk.table, one_line(exc))

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
        if self._unknown_decider is not None:
            self._unknown_decider.join(UNKNOWN_JOIN)  # a table's settle may be slow: a bound, then a daemon
        self.ledger.close()

    # -- observer ------------------------------------------------------------------------------
    def on_tick(self, bridge: BridgeView) -> None:
        self.ledger.heartbeat()
        now = time.monotonic()
        if now >= self._next_prune and not (self._pruner and self._pruner.is_alive()):
            self._next_prune = now + PRUNE_EVERY
            self._pruner = threading.Thread(target=self._prune, name="mqbridge-ledger-prune", daemon=True)
            self._pruner.start()
        if self._unknown and now >= self._next_unknown and not (
                self._unknown_decider and self._unknown_decider.is_alive()):
            self._next_unknown = now + UNKNOWN_EVERY
            self._unknown_decider = threading.Thread(target=self._decide_unknown_quietly, daemon=True,
                                                     name="mqbridge-ledger-unknown")
            self._unknown_decider.start()
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
