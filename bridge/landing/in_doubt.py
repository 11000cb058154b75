"""Prepared bulks the landing protocol (`mqbridge.landing.landing`) cannot finish by its normal steps, and
which this process must decide: a dead process's (or one past its lease), and its own whose outcome it
does not know.

Why a part of its own: the protocol's steps run on a bulk's way from the collector to its table, each
bulk once; these decisions run when a bulk's messages come back to a listener (`BulksInDoubt.claims_on`),
at a control tick (`tick`), and once Spark is up (`settle_dead`), for bulks whose writer is gone or
lost track. Three kinds:

* a prepared bulk of a dead process: Parquet files are rolled forward by the ledger's moves
  (`publication.roll_forward`); a table that commits by transaction (Delta Lake, Iceberg) is asked
  whether the bulk's version committed (`settle`, given by the composition root, as it needs Spark).
* one of this process's, whose `prepare` raised LedgerUnavailableError: the ledger may hold it prepared
  all the same (its connection lost at the COMMIT, which the server carried out:
  tests/integration/test_ledger_lost_commit.py). Nothing of it was published, and no other process
  decides a live owner's bulk: this one forgets it.
* one of this process's transactional bulks whose write failed while its table could not be asked
  (`decide_failed`), and a dead process's bulk it took over to decide (the take-over's answer may be
  lost in the same way): the table decides, once it can be asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mqbridge import failpoints
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.counters import Counters
from mqbridge.errors import LedgerUnavailableError, SinkOutageError, StuckBulkError, one_line
from mqbridge.landing.ledger import Ledger, PreparedBulk
from mqbridge.landing.publication import discard, roll_forward, staging_dir
from mqbridge.landing.stuck import advice

log = logging.getLogger(__name__)

#: How often a control tick asks the ledger about this process's bulks whose outcome is unknown.
UNKNOWN_EVERY = 2.0
#: How long `close` waits for that question to end.
UNKNOWN_JOIN = 10.0


@dataclass
class BulksInDoubt:
    """The decisions of the module docstring for one process (`owner`), serialised by one lock: a
    listener that finds a bulk holding its messages, the tick's thread and the start's `settle_dead`
    never decide the same bulk twice."""

    ledger: Ledger
    owner: str
    counters: Counters
    warehouse: Path | ObjectStoreUri  # recovery touches only paths of its tables (publication.check_bulk_paths)
    config_path: str = ""  # the configuration file, named in the command given for a stuck bulk
    #: Decides a dead process's prepared bulk of a table that commits by transaction (True: its rows
    #: are in the table), `mqbridge.landing.delta.settle` with a Spark session; None: none such tables.
    settle: Callable[[PreparedBulk], bool] | None = None
    #: How `settle` undid a bulk that never committed, by its table's format (`TableFormat.rolled_back`).
    rolled_back: Callable[[PreparedBulk], str] | None = None
    #: This process's prepared bulks that its table decides once it can be asked (`decide_failed`,
    #: `_settle`), or whose `prepare` may have been recorded (`_unknown`).
    _undecided: set[str] = field(default_factory=set)
    #: This process's bulks whose `prepare` raised (`prepare_lost`), by id: True for a table that commits
    #: by transaction; the bulks of dead processes it takes over to decide (`_settle`), and its own whose
    #: table could not be asked after a failed write (`decide_failed`). Decided when their messages come
    #: back or at a tick (`decide_unknown`): no other process decides a live owner's bulk.
    _unknown: dict[str, bool] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next_unknown: float = 0.0
    _unknown_decider: threading.Thread | None = None
    _unknown_failed: str = ""  # why the last `decide_unknown` failed (`_decide_unknown_quietly`)

    def claims_on(self, identities: Sequence[str]) -> tuple[list[PreparedBulk], set[str]]:
        """The prepared bulks holding some of `identities` that are still in flight (a live owner's,
        this process's own on their way), once every other one is decided here; and which of
        `identities` are published after those decisions."""
        with self._lock:
            claims = [bulk for bulk in self.ledger.prepared_holding(identities) if not self._finish_if_dead(bulk)]
            return claims, self.ledger.published(identities)

    def prepare_lost(self, bulk_id: str, *, transactional: bool) -> None:
        """This process's `prepare` of `bulk_id` raised LedgerUnavailableError: recorded or not, none of it
        was published (a transaction's write never ran); decided when its messages come back or at a tick."""
        self._unknown[bulk_id] = transactional
        if transactional:
            self._undecided.add(bulk_id)

    def _finish_if_dead(self, bulk: PreparedBulk) -> bool:
        """Roll forward (or back) a prepared bulk whose owner is dead, or one of this process's whose
        outcome it must decide (`decide_failed`, `prepare_lost`); False if it is in flight."""
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
        with self._lock:
            prepared = {bulk.bulk_id: bulk for bulk in self.ledger.in_progress() if bulk.owner == self.owner}
            for bulk_id in list(self._unknown):
                bulk = prepared.get(bulk_id)
                if bulk is None:
                    self._unknown.pop(bulk_id, None)
                    self._undecided.discard(bulk_id)
                else:
                    self._finish_if_dead(bulk)

    def tick(self) -> None:
        """A control tick: start `decide_unknown` on a thread of its own (a table's settle may take
        seconds; the control thread must not wait) when there is something to decide, at most every
        UNKNOWN_EVERY and one at a time."""
        now = time.monotonic()
        if self._unknown and now >= self._next_unknown and not (
                self._unknown_decider and self._unknown_decider.is_alive()):
            self._next_unknown = now + UNKNOWN_EVERY
            self._unknown_decider = threading.Thread(target=self._decide_unknown_quietly, daemon=True,
                                                     name="mqbridge-ledger-unknown")
            self._unknown_decider.start()

    def _decide_unknown_quietly(self) -> None:
        """The body of the thread `tick` starts: an error is logged, at WARNING when it differs from the
        last one (tried again at every tick: a store's outage would otherwise log every few seconds)."""
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
        """Decide a prepared bulk of a table that commits by transaction (`settle`), a dead process's or
        this one's; True once decided. Raises LedgerUnavailableError (the unit goes back, to be asked
        again) while the table cannot be asked."""
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

    def settle_dead(self) -> int:
        """Decide every prepared bulk of a dead process whose table commits by transaction (start-up
        recovery leaves them, `RecoveryReport.transactional`: the table decides, with Spark); run once
        Spark is up. The number decided; LedgerUnavailableError when a table cannot be asked now."""
        decided = 0
        for bulk in self.ledger.in_progress():
            if bulk.transaction is None or bulk.owner == self.owner or self.ledger.owner_alive(bulk.owner):
                continue
            with self._lock:
                if self.ledger.state_of(bulk.bulk_id) == "prepared":  # not decided by a listener meanwhile
                    decided += self._settle(bulk)
        return decided

    def decide_failed(self, bulk: PreparedBulk, exc: Exception) -> None:
        """After the write of this process's prepared transactional `bulk` raised `exc`: ask its table
        (`Landing.commit` says what follows). Returns when it committed after all (recorded published)."""
        if self.settle is None:  # no table to ask (a caller without Spark): the next start asks it
            raise exc
        with self._lock:
            try:
                landed = self.settle(bulk)
            except Exception as why:  # decided when its messages come back, or at a tick once the table answers
                self._undecided.add(bulk.bulk_id)
                self._unknown[bulk.bulk_id] = True
                raise SinkOutageError(f"bulk {bulk.bulk_id} of table {bulk.table} failed ({one_line(exc)}) and its "
                                      f"table cannot be asked whether it committed ({one_line(why)}): its messages "
                                      "go back to their queue and land once the table answers") from exc
        if not landed:
            raise exc
        failpoints.hit("after_publish")
        log.warning("bulk %s of table %s committed although its write failed (%s): recorded published",
                    bulk.bulk_id, bulk.table, one_line(exc))

    def close(self) -> None:
        """Wait, bounded, for a tick's decision under way (a table's settle may be slow: then a daemon)."""
        if self._unknown_decider is not None:
            self._unknown_decider.join(UNKNOWN_JOIN)
