"""Adaptive concurrency: the bridge chooses how many threads read each queue whose `[[listeners]]
threads` is unset, while it runs.

Why threads: a listener thread's units of work spend most of their time waiting for the bulk that
holds them to be written (docs/performance.md: 6.7-7.5 s of 11 s finishing units). More threads keep
more units in flight, so each bulk grows and a write's fixed cost is shared by more messages, until
the writes, the broker or the CPU are the limit. Where that point lies depends on the machine, the
broker, the message size and the table format, so it is measured here, not configured.

The control law is hill climbing on the committed rate, as the .NET thread pool chooses its thread
count (Hellerstein et al., "Optimizing concurrency levels in the .NET ThreadPool", 2008), with TCP's
slow start and multiplicative decrease around it. Every `SAMPLE_SECONDS` each adaptive listener is
sampled: the messages it committed, the thread-seconds its threads waited for a message that did not
come, the collector's memory waits, the mean receipt-to-commit time of what it committed.

- **Slow start.** While doubling the threads raises the rate by `GAIN_START`, double (1, 2, 4, ...
  up to `threads_max`); the first doubling that does not is undone, and the climb goes steady.
- **Steady.** Every `PROBE_SECONDS`, one thread more; kept if the rate rises by `GAIN_PROBE`,
  undone otherwise.
- **Pressure: halve.** The collector's memory is full (a submit waited for memory), or the mean
  receipt-to-commit time is above `LATENCY_FACTOR` x the listener's type's latency target. At most
  once per round, as TCP cuts its window once per round trip: what commits in the seconds after a
  halving was read before it, under the old count, so its receipt-to-commit time (and the memory its
  units hold) says nothing of the new count. The next halving waits until the messages committed were
  read after this one: the mean receipt-to-commit time measured at the halving (at most
  `ROUND_MAX_SECONDS`). Without the wait, one slow round halved 8 threads to 1 in three seconds
  (two bridges on one queue, docs/scaling.md), and the listener was left probing back one thread per
  `PROBE_SECONDS`.
- **A halving for latency is judged**, as a growth is, over the samples read after it. It is kept
  when it cured queueing: the receipt-to-commit time fell by `CUT_GAIN` (or below the bound) while the
  rate held (within `GAIN_START` of the samples before it). Otherwise the time was the sink's (a slow
  commit, a shared table, a busy machine), and fewer threads only made smaller bulks, at a lower rate:
  with a backlog that makes every message wait longer in the queue than it saved after receipt. The
  count goes back, and the time that caused the halving is accepted as this count's: the guard halves
  again only above `SINK_MARGIN` x it (more queueing on top), until a sample meets the bound again.
  One change at a time: the latency guard waits while a growth is being judged (its own verdict
  comes first, from the rate). Nor does it act on the first round of commits after a start (the
  receipt-to-commit time of the first sample, at most `ROUND_MAX_SECONDS`): their messages were read
  before the sink could write, so their time holds the Spark session's start and the first write.
- **Drained: hold.** Its threads waited for messages more than `IDLE_SHARE` of their time: more
  would not read more, and the sample says nothing of the rate. Drained for `IDLE_DECAY_SECONDS`,
  one thread fewer (down to 1), and the climb is in slow start again: the next backlog (a burst after
  a quiet hour) doubles, as TCP restarts from slow start after an idle period (RFC 5681, 4.1).
- **Arrivals: hold.** More than `IDLE_SHARE` of the units its threads read ended short of `batch`
  (no message was ready): the arrivals set the rate, so a change is neither made nor judged. Threads
  that hold their units while a slow sink writes wait for no message, so the waits alone miss this: a
  trickle judged as a backlog undid a doubling ("75 -> 16 msg/s: back to 1") and left a bridge in the
  steady climb at one thread, one more per `PROBE_SECONDS`, when the backlog came (docs/scaling.md).
- **Before the first commit** no rate can be judged: the sink's first write holds the Spark session's
  start (seconds, minutes on a busy host). A backlog shows all the same: the threads read whole units
  (at most `IDLE_SHARE` of them short) and none waited for a message. Then double once a sample, up
  to half the ceiling, so that the first write takes a backlog's worth of units and the judged climb
  starts nearer its end (the quick start reached half its steady rate 1.2 s after its first commit
  instead of 3.2, docs/performance.md); the last doubling is the judged climb's, from the rate. Never
  again after the listener's first commit (an outage later is not a start: more threads would only
  hold more messages back).
- **Nothing committed** (a sink or broker outage, or no messages) for `QUIET_MAX_SECONDS`: hold, and
  start the judging over. Shorter stretches without a commit are not samples of their own: commits
  come a bulk at a time, and a listener whose bulks land every few seconds (a slow sink, a table
  several bridges share) would otherwise never see two samples in a row with a commit, and never
  grow. A sample runs from one commit to the next, however long (up to that limit).

A change takes effect through the supervisor's own path for a changed thread count (the one
`mqbridge listener threads` takes): a thread beyond the count finishes the units it holds, commits or
gives them back in order, and ends; a new one connects and reads. Exactly-once is that path's: the
tuner only sets a number. After a change `SKIP_SAMPLES` are skipped (threads starting and ending),
then `JUDGE_SAMPLES` are averaged, so that a bulk's lumpy commits do not decide alone: 3 s for a
doubling in slow start, 7 s for a steady probe (longer where commits are further apart than a second).
A growth is judged only on what commits one round after it (the receipt-to-commit time seen when it
was made, as for a halving): what commits earlier was read before it, while the new threads
connected. Judged a second after it, a doubling of 4 threads to 8 on RabbitMQ was undone in four of
nine quick starts ("3,945 -> 2,634 msg/s: back to 4"), and was kept in all of four once judged a round
later (docs/performance.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mqbridge.counters import Counters
from mqbridge.supervision.control import ListenerControl, ListenerControls

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger("mqbridge.control")  # the name operators configure

SAMPLE_SECONDS = 1.0
#: Samples skipped after a change (threads starting and ending), then averaged to judge it, by phase:
#: a doubling shows at once and must come quickly (a quick start of a backlog), one thread more is a
#: small step that needs a longer look through the noise of lumpy commits.
SKIP_SAMPLES = {"start": 1, "steady": 2}
JUDGE_SAMPLES = {"start": 2, "steady": 5}
GAIN_START = 0.10  # slow start doubles again while a doubling raises the rate this much
GAIN_PROBE = 0.05  # a steady probe's thread is kept when it raises the rate this much
PROBE_SECONDS = 30.0
IDLE_SHARE = 0.25  # threads waiting for messages more than this share of their time: drained
IDLE_DECAY_SECONDS = 60.0
LATENCY_FACTOR = 4.0  # mean receipt-to-commit above this many latency targets: halve
ROUND_MAX_SECONDS = 30.0  # the longest wait after a halving before pressure may halve again
CUT_GAIN = 0.25  # a halving for latency is kept when receipt-to-commit falls by this share (or under the bound)
SINK_MARGIN = 2.0  # after a halving that did not help, halve only above this many times the sink's latency
QUIET_MAX_SECONDS = 15.0  # nothing committed for this long: a sample that says so (an outage, or no messages)
SAMPLE_LOG_LEVEL = logging.DEBUG  # each sample and its verdict; the changes are logged at INFO


@dataclass(frozen=True)
class Sample:
    """What one adaptive listener did over `seconds`."""

    seconds: float
    committed: float  # messages committed
    waited: float  # thread-seconds its threads waited for a message that did not come
    threads: int  # its threads alive at the end
    backpressure: bool = False  # a submit to the collector waited for memory
    latency: float | None = None  # mean receipt-to-commit seconds of what it committed
    units: int = 0  # units of work its threads read
    short: int = 0  # of them, units that ended short of `batch`: no message was ready

    @property
    def rate(self) -> float:
        return self.committed / self.seconds if self.seconds > 0 else 0.0

    @property
    def idle_share(self) -> float:
        """The share of its threads' time spent waiting for messages."""
        return self.waited / (self.seconds * max(self.threads, 1)) if self.seconds > 0 else 1.0

    @property
    def short_share(self) -> float:
        """The share of the units read that ended short of `batch` (no message was ready)."""
        return self.short / self.units if self.units else 0.0


@dataclass(frozen=True)
class Cut:
    """A halving for receipt-to-commit time, judged once what commits was read after it."""

    threads: int  # the count before the halving
    latency: float  # the mean receipt-to-commit seconds that caused it
    after: float  # from then on, what commits was read after the halving (one round)
    rate: float  # msg/s over the samples before it


@dataclass
class Climb:
    """One adaptive listener's hill climb (module docstring)."""

    phase: str = "start"  # start (doubling) | steady (one thread at a time)
    skip: int = 0  # samples still to skip after a change
    window: list[Sample] = field(default_factory=list)
    judging: bool = False  # the last change was a growth, judged against base_rate
    base_rate: float = 0.0
    base_threads: int = 1
    next_probe: float = 0.0
    idle_since: float | None = None
    pressure_after: float = 0.0  # the next halving under pressure waits until then (one round)
    cut: Cut | None = None  # a halving for latency being judged
    recent: list[Sample] = field(default_factory=list)  # the last JUDGE_SAMPLES["steady"] samples that committed
    sink_latency: float = 0.0  # receipt-to-commit seconds accepted after a halving that did not pay
    latency_after: float = 0.0  # the latency guard waits until then: what commits first was read before the sink wrote
    judge_after: float = 0.0  # a growth is judged on samples from then on: what commits was read after it (one round)

    def changed(self) -> None:
        self.skip, self.window = SKIP_SAMPLES[self.phase], []

    def settle(self, now: float) -> None:
        """Go steady: no growth is being judged; the next probe after `PROBE_SECONDS`."""
        self.phase, self.judging, self.next_probe = "steady", False, now + PROBE_SECONDS


def decide(climb: Climb, threads: int, ceiling: int, sample: Sample, latency_target: float | None,
           now: float) -> tuple[int, str] | None:
    """The thread count the law gives after `sample` (module docstring) and why, or None to keep
    `threads`. Updates `climb`."""
    if sample.committed <= 0:
        climb.window, climb.judging, climb.cut = [], False, None
        return None
    climb.recent = [*climb.recent[1 - JUDGE_SAMPLES["steady"]:], sample]
    bound = LATENCY_FACTOR * latency_target if latency_target else None
    if bound is not None and sample.latency is not None and sample.latency <= bound:
        climb.sink_latency = 0.0  # the sink meets the target again
    slow = (bound is not None and sample.latency is not None and climb.cut is None and not climb.judging
            and now >= climb.latency_after and sample.latency > max(bound, SINK_MARGIN * climb.sink_latency))
    if threads > 1 and now >= climb.pressure_after and (sample.backpressure or slow):
        climb.settle(now)
        climb.window = []
        climb.pressure_after = now + _round(sample)
        if sample.backpressure:
            why = "the collector's memory is full (a submit waited for memory)"
        else:
            assert sample.latency is not None and latency_target is not None
            climb.cut = Cut(threads, sample.latency, rate=_rate(climb.recent), after=climb.pressure_after)
            why = (f"receipt-to-commit {sample.latency:.1f} s on average, above "
                   + (f"{LATENCY_FACTOR:g} x the {latency_target:g} s latency target" if not climb.sink_latency
                      else f"{SINK_MARGIN:g} x the sink's {climb.sink_latency:.1f} s"))
        return max(1, threads // 2), f"{why}: halved"
    if sample.idle_share > IDLE_SHARE:  # not counted: a growth being judged waits for a busy sample
        if climb.idle_since is None:
            climb.idle_since = now
        if now - climb.idle_since >= IDLE_DECAY_SECONDS:
            climb.idle_since = now
            # the next backlog is a start again, as TCP restarts from slow start after an idle period
            climb.phase, climb.judging, climb.window = "start", False, []
            if threads > 1:
                return threads - 1, (f"the queue is drained (its threads waited {sample.idle_share:.0%} of the time "
                                     f"for messages for {IDLE_DECAY_SECONDS:.0f} s): one thread fewer")
        return None
    climb.idle_since = None
    if sample.short_share > IDLE_SHARE:
        return None  # the arrivals set the rate, not the threads: neither grown nor judged (module docstring)
    if climb.skip:
        climb.skip -= 1
        return None
    if climb.cut is not None and now < climb.cut.after:
        return None  # what commits now was read before the halving
    if climb.judging and now < climb.judge_after:
        return None  # what commits now was read before the growth
    climb.window.append(sample)
    if len(climb.window) < JUDGE_SAMPLES[climb.phase]:
        return None
    rate = _rate(climb.window)
    latencies = [s.latency for s in climb.window if s.latency is not None]
    climb.window = []
    if climb.cut is not None:
        cut, climb.cut = climb.cut, None
        latency = sum(latencies) / len(latencies) if latencies else 0.0
        cured = bound is not None and (latency <= bound or latency <= (1 - CUT_GAIN) * cut.latency)
        held = rate >= (1 - GAIN_START) * cut.rate
        if cured and held:
            return None
        climb.sink_latency = cut.latency
        climb.settle(now)
        return cut.threads, (f"{cut.threads} -> {threads} threads: receipt-to-commit {cut.latency:.1f} -> "
                             f"{latency:.1f} s at {cut.rate:,.0f} -> {rate:,.0f} msg/s: the sink's time, not the "
                             f"threads' queueing: back to {cut.threads}")
    if climb.judging:
        gain = GAIN_START if climb.phase == "start" else GAIN_PROBE
        before = f"{climb.base_threads} -> {threads} threads: {climb.base_rate:,.0f} -> {rate:,.0f} msg/s"
        if rate < climb.base_rate * (1 + gain):
            back = climb.base_threads
            climb.settle(now)
            return back, f"{before}, less than {gain:.0%} more: back to {back}"
        if climb.phase == "start" and threads < ceiling:
            climb.base_rate, climb.base_threads = rate, threads
            climb.judge_after = now + _round(sample)
            return min(ceiling, threads * 2), f"slow start: {before}; doubling again"
        climb.settle(now)
        return None
    if threads >= ceiling or (climb.phase == "steady" and now < climb.next_probe):
        return None
    climb.judging, climb.base_rate, climb.base_threads = True, rate, threads
    climb.judge_after = now + _round(sample)
    if climb.phase == "start":
        return min(ceiling, threads * 2), (f"slow start: {rate:,.0f} msg/s with {threads} threads and a "
                                           "backlog: doubling")
    return threads + 1, f"probing: {rate:,.0f} msg/s with {threads} threads and a backlog: one more"


def _round(sample: Sample) -> float:
    """One round: the time from a message's receipt to its commit, as `sample` saw it (at least a
    sample, at most `ROUND_MAX_SECONDS`): what commits that long after a change was read after it."""
    return min(ROUND_MAX_SECONDS, max(sample.latency or 0.0, SAMPLE_SECONDS))


def _rate(samples: list[Sample]) -> float:
    seconds = sum(s.seconds for s in samples)
    return sum(s.committed for s in samples) / seconds if seconds > 0 else 0.0


def latency_targets(config: BridgeConfig) -> dict[str, float | None]:
    """Each listener entry's type's latency target, by `source:queue` (of the configuration in force:
    a reload may change it)."""
    types = config.types
    return {f"{cfg.source}:{cfg.queue}": (types[cfg.message_type].latency if cfg.message_type in types else None)
            for cfg in config.listeners}


class ConcurrencyTuner:
    """Samples each adaptive listener entry every `SAMPLE_SECONDS` and sets its thread count
    (`ListenerControls.tune`); the supervisor's control thread calls `step` on every wake-up."""

    def __init__(self, controls: ListenerControls, counters: Counters, *,
                 latency_targets: Callable[[], Mapping[str, float | None]],
                 backpressure_waits: Callable[[], int], alive: Callable[[str], int]) -> None:
        """`latency_targets()`: each listener's type's latency target, by name; `backpressure_waits()`:
        the collector's count of submits that waited for memory; `alive(name)`: its live threads."""
        self.controls, self.counters = controls, counters
        self._latency_targets, self._backpressure, self._alive = latency_targets, backpressure_waits, alive
        self.climbs: dict[str, Climb] = {}
        #: each listener's counters when its current sample began (`_totals`), the time, the collector's
        #: memory waits
        self._last: dict[str, tuple[tuple[float, float, float, int, float, float], float, int]] = {}
        #: before a listener's first commit: its messages received, wait seconds, units read and units
        #: short, the time and the collector's memory waits when the current look began (`_before_first_commit`)
        self._early: dict[str, tuple[float, float, float, float, float, int]] = {}
        self._last_at: float | None = None

    def step(self, now: float) -> None:
        if self._last_at is not None and now - self._last_at < SAMPLE_SECONDS:
            return
        self._last_at = now
        backpressure = self._backpressure()
        targets = self._latency_targets()
        for control in self.controls:
            if not control.adaptive:
                self.climbs.pop(control.name, None)
                self._last.pop(control.name, None)
                continue
            totals = self._totals(control.name)
            if totals[0] <= 0 and control.name not in self.climbs:
                self._before_first_commit(control, now, backpressure)
                continue
            self._early.pop(control.name, None)
            before = self._last.get(control.name)
            if before is None:
                self._last[control.name] = (totals, now, backpressure)
                continue
            (committed, waited, latency, count, units, short), since, waits = before
            seconds = now - since
            if seconds <= 0 or (totals[0] - committed <= 0 and seconds < QUIET_MAX_SECONDS):
                continue  # the sample goes on until it holds a commit (module docstring)
            self._last[control.name] = (totals, now, backpressure)
            count = totals[3] - count
            sample = Sample(seconds, totals[0] - committed, totals[1] - waited, self._alive(control.name),
                            backpressure > waits, (totals[2] - latency) / count if count else None,
                            int(totals[4] - units), int(totals[5] - short))
            climb = self.climbs.get(control.name)
            if climb is None:  # its first commits: their messages waited for the sink's start (one round)
                after = now + _round(sample)
                climb = self.climbs[control.name] = Climb(latency_after=after)
            ceiling = control.ceiling or control.threads
            verdict = decide(climb, control.threads, ceiling, sample, targets.get(control.name), now)
            log.log(SAMPLE_LOG_LEVEL, "listener %s: %d threads (%d alive), %.0f msg/s, waited %.0f%%, units short "
                    "%.0f%%, receipt-to-commit %s, %s%s -> %s", control.name, control.threads, sample.threads,
                    sample.rate, 100 * sample.idle_share, 100 * sample.short_share,
                    "-" if sample.latency is None else f"{sample.latency:.2f} s",
                    climb.phase, " (judging)" if climb.judging else "", verdict)
            if verdict is None:
                continue
            if self._tune(control, *verdict):
                climb.changed()
            else:
                self.climbs.pop(control.name, None)  # fixed or paused meanwhile: start over when it is not

    def _before_first_commit(self, control: ListenerControl, now: float, backpressure: int) -> None:
        """Before the listener's first commit: double its threads, up to half the ceiling, while they
        read whole units and none waited for a message (module docstring). A look runs from the start
        (or the last change) until the threads have read something since: new threads take a moment to
        connect, and threads that hold their units read nothing more until the first write ends."""
        received = self.counters.total("messages_received", listener=control.name)
        waited = self.counters.total("listener_wait_seconds", listener=control.name)
        units = self.counters.total("listener_units_read", listener=control.name)
        short = self.counters.total("listener_units_short", listener=control.name)
        start = self._early.setdefault(control.name, (0.0, 0.0, 0.0, 0.0, now, backpressure))
        read, idle, seconds = received - start[0], waited - start[1], now - start[4]
        if read <= 0 or seconds < SAMPLE_SECONDS:
            return
        self._early[control.name] = (received, waited, units, short, now, backpressure)
        alive = self._alive(control.name)
        half = max(1, (control.ceiling or control.threads) // 2)
        if (control.threads >= half or alive < control.threads or backpressure > start[5]
                or idle > IDLE_SHARE * seconds * max(alive, 1) or short - start[3] > IDLE_SHARE * (units - start[2])):
            return
        self._tune(control, min(half, 2 * control.threads),
                   f"before the first commit: {read:,.0f} messages read in {seconds:.1f} s in whole units, none of "
                   f"its {alive} threads waiting for one: a backlog: doubling (up to {half} until commits can be "
                   "judged)")

    def _tune(self, control: ListenerControl, threads: int, reason: str) -> bool:
        """Set the listener's count through the controls; log and count the change (False: it is fixed
        or paused now, and the count stays the operator's)."""
        old = control.threads
        if not self.controls.tune(control.name, threads, reason):
            return False
        self.counters.inc("listener_threads_tuned", listener=control.name, direction="up" if threads > old else "down")
        log.info("listener %s: threads %d -> %d (adaptive, up to %d): %s", control.name, old, control.threads,
                 control.ceiling or control.threads, reason)
        return True

    def _totals(self, name: str) -> tuple[float, float, float, int, float, float]:
        """(messages committed, wait seconds, receipt-to-commit sum, its count, units read, units short)."""
        latency, count = self.counters.histogram_sum("receipt_to_commit_seconds", listener=name)
        return (self.counters.total("messages_committed", listener=name),
                self.counters.total("listener_wait_seconds", listener=name), latency, count,
                self.counters.total("listener_units_read", listener=name),
                self.counters.total("listener_units_short", listener=name))
