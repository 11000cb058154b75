"""Follow: each forward's table tailed through the landing ledger, and every row of every bulk landed
there sent on to each of the forward's destinations, once (`mqbridge follow`).

**Which rows are new.** The landing ledger records every bulk the bridge publishes, with its table
and the time it was published; once it says published, the bulk's rows are in the table. A pass asks
it for the bulks of the forward's table published since the forward's mark, less `MARGIN`: a bulk
another bridge published a moment earlier by its clock, but made visible a moment later (two bridges
sharing a PostgreSQL ledger), is still found. Bulks a lane has finished are skipped (a page of them at
a time: more than a page may fall within the margin); the mark moves to the first bulk not finished by
every lane. A new forward starts with the bulks published from its
first pass on (`start = "new"`), or with every bulk the ledger still holds (`"all"`).

**Each row once per destination.** A lane is one forward's one destination, with an id in the follow
ledger (`mqbridge.resend.follow.ledger`) and a target: the replay's sender for the source's kind,
with its marker queue. The rows of a bulk go to a lane in batches by the replay's protocol
(`mqbridge.resend.replay.runner.send_batch`: recorded, sent with a marker in one unit of work, marked
sent), and the bulk is recorded finished when its last batch is. A lane opened after a kill first
settles the batches it left in doubt from their markers, so a killed follower resumes without a row
twice or a row skipped; on RabbitMQ (no atomic unit of work) a kill between a batch's first row and
its marker sends that batch again, as a replay does.

**Order.** A destination receives bulks in the order they were published, and a bulk's rows in
`put_timestamp` order (a row put earlier may come later, in a later bulk).

**Failures.** An outage (a broker, Spark or the ledger down; a destination that takes nothing now:
`destination_full`) ends the pass: its targets are closed, and the next pass, after a wait that
doubles up to `RETRY_MAX`, opens them again and settles what was in doubt. A batch the destination
refuses while its broker is there is sent again row by row, as the bridge isolates a poison message:
the rows it takes go on, and a row refused alone is counted; at the forward's `backout_threshold` it
goes to its `backout_queue` (its body, the reason, where it comes from; by its own lane of the follow
ledger, once), and without one the forward holds at that row, saying why. The mark never passes a
bulk a held row is in. Counts are kept by the process (a restart counts again from 0).

**Purged first.** A bulk whose rows a purge deleted before the forward reached it is finished with
the rows left, and said in the log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mqbridge.errors import one_line
from mqbridge.landing.session import connect_session_lost, connection_lost
from mqbridge.landing.verdicts import row_bulk_id
from mqbridge.resend.follow.ledger import FollowLedger
from mqbridge.resend.replay.rows import ReplayRow, Selection, read_rows
from mqbridge.resend.replay.runner import ReplayTarget, send_batch, settle

if TYPE_CHECKING:
    from mqbridge.config.forwards import ForwardConfig
    from mqbridge.config.warehouse import Location
    from mqbridge.landing.ledger import Ledger
    from mqbridge.landing.session import SparkSessions

log = logging.getLogger("mqbridge.follow")

#: Seconds looked back before a forward's mark for bulks published late (module docstring).
MARGIN = 300.0
#: Rows read from the table per pass: bulks are taken, oldest first, until their rows pass this ...
READ_ROWS = 20_000
#: ... or their bytes may (a bulk counted at the largest `bulk_size` of the types): the rows of a pass
#: are held in memory while they are sent. A bulk larger than both is read alone.
READ_BYTES = 64 << 20
#: Bulks asked of the landing ledger per pass.
BULKS_PER_PASS = 2_000
#: The longest wait between passes after a failure, in seconds.
RETRY_MAX = 60.0


def backout_lane(lane: Lane) -> str:
    """The id of a lane's backout queue in the follow ledger (and its marker queue)."""
    return f"{lane.id}-backout"


def destination_full(exc: BaseException) -> bool:
    """Whether a refusal says the destination takes nothing now (not this row): ActiveMQ's store or
    memory limit (ResourceAllocationException), or RabbitMQ closing the connection without an ERROR,
    which it does for a full queue with `overflow = reject-publish` (`mqbridge.listeners.stomp.replay`).
    Such a refusal is an outage: counted against no row."""
    text = str(exc)
    return "ResourceAllocationException" in text or "without a reason when the queue refuses" in text


def lane_id(forward: str, destination: str) -> str:
    """A lane's id in the follow ledger, in its rows' `mqbridge-replay-id` and its marker queue's name."""
    return f"follow-{forward}-{hashlib.sha256(destination.encode()).hexdigest()[:12]}"


@dataclass
class Lane:
    """One forward's one destination."""

    forward: ForwardConfig
    destination: str
    id: str
    target: ReplayTarget | None = None
    rows: int = 0  # rows this process sent


@dataclass(frozen=True)
class Published:
    """A bulk the landing ledger holds as published."""

    bulk_id: str
    at: float
    identities: int


@dataclass(frozen=True)
class PassResult:
    """What a pass did: rows sent; whether bulks wait beyond what it read (the next pass follows at
    once); whether a refused row is on its way to a backout queue (the forward is not idle)."""

    sent: int = 0
    more: bool = False
    moving: bool = False


#: Builds a lane's connected target (the replay sender of the forward's source kind).
TargetFactory = Callable[[Lane], ReplayTarget]


@dataclass
class Follower:
    """The forwards of one configuration, passed over again and again (`run`)."""

    forwards: Sequence[ForwardConfig]
    tables: Callable[[str], Location]  # a forward's `table` under the warehouse
    spark: SparkSessions  # started again when its JVM is gone (killed, out of memory) or Connect lost it
    landing: Ledger
    ledger: FollowLedger
    open_target: TargetFactory
    now: Callable[[], float]
    bulk_bytes: int  # the most a bulk can hold: the largest `bulk_size` of the configuration's types
    lanes: dict[str, list[Lane]] = field(default_factory=dict)
    backouts: dict[str, Lane] = field(default_factory=dict)  # by backout lane id: open backout queue targets
    refusals: dict[str, dict[str, int]] = field(default_factory=dict)  # lane id -> row key -> times refused

    def __post_init__(self) -> None:
        self.lanes = {f.name: [Lane(f, d, lane_id(f.name, d)) for d in f.to] for f in self.forwards}

    def run(self, stop: threading.Event, *, until_idle: float | None = None) -> None:
        """Pass over the forwards until `stop` is set (or, with `until_idle`, until no pass has found a
        row to send for that long); a pass that fails is logged, and the next waits (module docstring)."""
        idle_since = self.now()
        retry = 0.0
        while not stop.is_set():
            try:
                result = self.pass_over(stop)
            except Exception as exc:  # an outage or a refusal: the next pass settles and sends again
                retry = min(RETRY_MAX, max(1.0, retry * 2))
                log.warning("follow: a pass failed (%s); the next in %.0fs", one_line(exc), retry)
                self.close_targets()
                stop.wait(retry)
                continue
            if retry:
                log.info("follow: passing again")
                retry = 0.0
            if result.sent or result.more or result.moving:
                idle_since = self.now()
            elif until_idle is not None and self.now() - idle_since >= until_idle:
                return
            if not result.more:
                stop.wait(min(f.every for f in self.forwards))

    def pass_over(self, stop: threading.Event) -> PassResult:
        """One pass over every forward."""
        result = PassResult()
        for forward in self.forwards:
            if stop.is_set():
                break
            one = self._pass(forward, stop)
            result = PassResult(result.sent + one.sent, result.more or one.more, result.moving or one.moving)
        return result

    def close_targets(self) -> None:
        """Close every lane's connection (a lane opens it again when it next sends)."""
        for lane in [*(lane for lanes in self.lanes.values() for lane in lanes), *self.backouts.values()]:
            self._close(lane)
        self.backouts.clear()

    def _pass(self, forward: ForwardConfig, stop: threading.Event) -> PassResult:
        lanes = self.lanes[forward.name]
        bulks, pending, finished, full = self.pending(forward)
        chunk: list[Published] = []
        for bulk in pending:
            counted = sum(b.identities for b in chunk) + bulk.identities
            if chunk and (counted > READ_ROWS or (len(chunk) + 1) * self.bulk_bytes > READ_BYTES):
                break
            chunk.append(bulk)
        sent, held_at = 0, []  # held_at: when the bulks a refused row holds were published
        if chunk:
            rows = self._rows(forward, chunk)
            for lane in lanes:
                for bulk in chunk:
                    if stop.is_set():
                        return PassResult(sent, more=True)
                    if bulk.bulk_id not in finished[lane.id]:
                        bulk_sent, held = self._send_bulk(lane, bulk, rows.get(bulk.bulk_id, []))
                        sent += bulk_sent
                        if held:
                            held_at.append(bulk.at)
        rest = pending[len(chunk):]
        # The mark stops at the first bulk not finished by every lane: it is looked for again.
        unfinished = held_at + ([rest[0].at] if rest else [])
        if unfinished:
            self._move_mark(forward, lanes, min(unfinished))
        elif bulks:
            self._move_mark(forward, lanes, bulks[-1].at)
        return PassResult(sent, more=bool(rest) or full,
                          moving=bool(held_at) and forward.backout_queue is not None)

    def pending(self, forward: ForwardConfig) -> tuple[list[Published], list[Published], dict[str, set[str]], bool]:
        """(the bulks looked at, those some lane of `forward` has not finished, the ids each lane has
        finished among them, whether the ledger has more after them). Looks from the mark less MARGIN,
        a page of BULKS_PER_PASS at a time, on past pages every lane has finished (more than a page may
        be published within MARGIN)."""
        lanes = self.lanes[forward.name]
        since, floor = self._mark(forward)
        start = max(floor, since - MARGIN)
        seen: dict[str, Published] = {}
        pending: list[Published] = []
        done: dict[str, set[str]] = {lane.id: set() for lane in lanes}
        while True:
            page = [Published(*b) for b in self.landing.published_since(forward.table, start, BULKS_PER_PASS)]
            new = [b for b in page if b.bulk_id not in seen]
            seen.update((b.bulk_id, b) for b in new)
            for lane in lanes:
                done[lane.id] |= self.ledger.finished(lane.id, [b.bulk_id for b in new])
            pending += [b for b in new if any(b.bulk_id not in done[lane.id] for lane in lanes)]
            full = len(page) == BULKS_PER_PASS
            if pending or not full or page[-1].at <= start:  # (a page of one instant cannot be paged by time)
                return list(seen.values()), pending, done, full
            start = page[-1].at

    def _mark(self, forward: ForwardConfig) -> tuple[float, float]:
        """(mark, floor) of `forward`: it looks for bulks from the mark less MARGIN, never before the
        floor (a new forward's start)."""
        since = self.ledger.since(forward.name)
        if since is None:
            start = 0.0 if forward.start == "all" else self.landing.clock()  # (publications are stamped by it)
            self.ledger.set_since(forward.name, start, floor=start)
            log.info("forward %s: starts with the bulks of %s published %s", forward.name, forward.table,
                     "from now on" if forward.start == "new" else "since the landing ledger's oldest")
            return start, start
        return since, self.ledger.floor(forward.name)

    def _move_mark(self, forward: ForwardConfig, lanes: Sequence[Lane], since: float) -> None:
        if since > (self.ledger.since(forward.name) or 0.0):
            self.ledger.set_since(forward.name, since)
            for lane in lanes:  # the forward no longer looks back that far
                self.ledger.forget_before(lane.id, since - 2 * MARGIN)

    def _rows(self, forward: ForwardConfig, chunk: Sequence[Published]) -> dict[str, list[ReplayRow]]:
        """The rows of the forward's table that `chunk`'s bulks landed and the forward selects, by bulk,
        each bulk's in put_timestamp order; a bulk missing rows (purged first) is said."""
        ledger_ids = {row_bulk_id(b.bulk_id): b.bulk_id for b in chunk}  # one ledger bulk per table and bulk
        selection = Selection(where=forward.where, bulks=tuple(ledger_ids),
                              senders=tuple(forward.senders) if forward.senders else None)
        by_bulk: dict[str, list[ReplayRow]] = {}
        spark = self.spark.get()
        try:
            rows = list(read_rows(spark, self.tables(forward.table), selection))
        except Exception as exc:
            if connection_lost(exc) or connect_session_lost(exc):
                self.spark.reset(spark, one_line(exc))
            raise
        for row in rows:
            by_bulk.setdefault(ledger_ids[row.key.split("/", 1)[0]], []).append(row)
        if forward.where is None and forward.senders is None:
            for bulk in chunk:
                found = len(by_bulk.get(bulk.bulk_id, []))
                if found < bulk.identities:
                    log.warning("forward %s: bulk %s landed %d rows in %s, %d are left there (purged before the "
                                "forward reached them): sending those", forward.name, bulk.bulk_id, bulk.identities,
                                forward.table, found)
        return by_bulk

    def _send_bulk(self, lane: Lane, bulk: Published, rows: Sequence[ReplayRow]) -> tuple[int, bool]:
        """Send `rows` (one bulk's) to the lane in batches, skipping those sent (or backed out) before a
        kill; a batch the destination refuses is sent again row by row (`_isolate`). The bulk is
        recorded finished once every row is sent or backed out. (Rows sent now, whether a refused row
        holds the bulk.)"""
        rows_bulk = row_bulk_id(bulk.bulk_id)
        before = lane.rows
        if rows:
            if self.ledger.in_doubt(backout_lane(lane)):  # a backout a kill left in doubt: settled first
                self._backout_target(lane)
            target = self._target(lane)  # first: its batches in doubt settled, their rows' keys kept or forgotten
            done = self.ledger.bulk_keys(lane.id, rows_bulk) | self.ledger.bulk_keys(backout_lane(lane), rows_bulk)
            todo = [row for row in rows if row.key not in done]
            suspects = self.refusals.get(lane.id, {})
            plain = [row for row in todo if row.key not in suspects]
            size = lane.forward.batch
            batches = [plain[i:i + size] for i in range(0, len(plain), size)] + [[r] for r in todo if r.key in suspects]
            held = False
            for batch in batches:
                try:
                    send_batch(batch, target, self.ledger, lane.id)
                    target.release()
                    lane.rows += len(batch)
                except Exception as exc:
                    held = self._isolate(lane, batch, exc, rows_bulk) or held
                    target = self._target(lane)
            if held:
                return lane.rows - before, True
        self.ledger.finish(lane.id, bulk.bulk_id, rows_bulk, len(rows), bulk.at)
        self.ledger.finish(backout_lane(lane), bulk.bulk_id, rows_bulk, 0, bulk.at)
        if lane.rows > before:
            log.info("forward %s: %d rows of bulk %s sent to %s", lane.forward.name, lane.rows - before,
                     bulk.bulk_id, lane.destination)
        return lane.rows - before, False

    def _isolate(self, lane: Lane, batch: Sequence[ReplayRow], exc: Exception, rows_bulk: str) -> bool:
        """`batch` failed with `exc`: send its rows one by one, each on a target opened again (an outage
        shows there, and propagates). A row refused alone is counted against it, unless the refusal
        is the destination's state (`destination_full`: an outage, propagated); at the forward's
        `backout_threshold` it goes to `backout_queue`. Whether a row is left (the bulk is held)."""
        self._close(lane)
        self._target(lane)  # the broker is there (else the outage propagates), the batch in doubt settled
        held = False
        for row in batch:
            done = self.ledger.bulk_keys(lane.id, rows_bulk)
            if row.key in done:
                continue
            target = self._target(lane)
            try:
                send_batch([row], target, self.ledger, lane.id)
                target.release()
                lane.rows += 1
                continue
            except Exception as refused:
                self._close(lane)
                self._target(lane)
                if destination_full(refused):
                    raise
                reason = one_line(refused)
            counted = self.refusals.setdefault(lane.id, {})
            counted[row.key] = counted.get(row.key, 0) + 1
            threshold, backout = lane.forward.backout_threshold, lane.forward.backout_queue
            if counted[row.key] >= threshold and backout is not None:
                self._backout(lane, row, f"{lane.destination} refused it {threshold} times: {reason}")
                counted.pop(row.key)
                continue
            held = True
            log.warning("forward %s: %s refused row %s (%s): %s", lane.forward.name, lane.destination, row.key,
                        f"{counted[row.key]} of {threshold}; then to {backout}" if backout else
                        "the forward holds at this row: set its backout_queue to move such a row aside", reason)
        return held

    def _backout(self, lane: Lane, row: ReplayRow, reason: str) -> None:
        """Send `row` to the forward's backout queue, once (its own lane in the follow ledger): its body,
        where it comes from and the reason; not its own headers, which may be what was refused (the
        landed row keeps them)."""
        aside = dataclasses.replace(row, correlation_id=None, headers={
            "mqbridge-backout-reason": reason[:1000], "mqbridge-follow-destination": lane.destination})
        target = self._backout_target(lane)
        send_batch([aside], target, self.ledger, backout_lane(lane))
        target.release()
        log.warning("forward %s: row %s moved to %s: %s", lane.forward.name, row.key, lane.forward.backout_queue,
                    reason)

    def _backout_target(self, lane: Lane) -> ReplayTarget:
        """The lane's backout queue's target, opened if closed (its batches in doubt settled)."""
        backout = backout_lane(lane)
        if backout not in self.backouts:
            assert lane.forward.backout_queue is not None
            aside = Lane(lane.forward, lane.forward.backout_queue, backout)
            aside.target = self.open_target(aside)
            settle_lane(aside, aside.target, self.ledger)
            self.backouts[backout] = aside
        target = self.backouts[backout].target
        assert target is not None
        return target

    def _close(self, lane: Lane) -> None:
        if lane.target is not None:
            target, lane.target = lane.target, None
            try:
                target.close()
            except Exception as exc:  # already broken: a new one is opened
                log.debug("closing %s: %s", lane.destination, exc)

    def _target(self, lane: Lane) -> ReplayTarget:
        """The lane's target, opened if closed; a new one first settles the batches left in doubt."""
        if lane.target is None:
            lane.target = self.open_target(lane)
            settle_lane(lane, lane.target, self.ledger)
        return lane.target


def settle_lane(lane: Lane, target: ReplayTarget, ledger: FollowLedger) -> None:
    """The lane's batches left in doubt, settled as a replay settles them (`replay.runner.settle`);
    said once when there were any."""
    sent, again = settle(target, ledger, lane.id)
    if sent or again:
        target.release()
        log.info("forward %s: %d batches to %s left in doubt: %d had been sent, %d had not (sent again)",
                 lane.forward.name, sent + again, lane.destination, sent, again)
