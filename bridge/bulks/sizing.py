"""How big a type's next bulk should be: the executor's measured costs against the intake.

A write of n rows costs about `fixed + per_row × n` seconds (the fixed part is a Spark job's
planning, scheduling and commit; the per-row part moves and encodes the rows). While one bulk is
written, the next keeps growing (group commit), so the bridge keeps up with an intake of `rate`
rows/s when a write of n rows takes no longer than n rows take to arrive:

    fixed + per_row × n  <=  n / rate      ⇔      n  >=  rate × fixed / (1 − rate × per_row)

With `slots` writes of the type at a time (`[collector] writes_per_type`) the writes overlap and each
may take `slots` times as long: n ≥ rate × fixed / (slots − rate × per_row). The costs are measured
on overlapping writes, so they include what the two writes take from each other.

The target is twice that (headroom for the noise of both), but never more rows than arrive within
the type's `latency` (the longest a message may wait between its receipt and its write starting),
and the collector still closes a bulk at `latency`, at `bulk_size` bytes and on the other flush
conditions. When `rate × per_row >= slots` no bulk size keeps up: the target is the latency cap and the
memory limit slows the listeners down (backpressure).

`WriteCosts` learns `fixed` and `per_row` from the executor's writes as a least-squares line with
exponentially fading weights (recent writes count most: the JVM warms up, the machine gets busy);
`IntakeRate` measures the rows submitted per second. Both are read by the collector's timer and
workers under the collector's lock; neither takes a lock of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Weight kept by the past at each new write (fading memory of about ten writes).
DECAY = 0.9
#: Before any write: a Spark job's fixed cost and cost per 1 KB row on a 2-core machine, local[2].
PRIOR_FIXED_SECONDS = 0.2
PRIOR_ROW_SECONDS = 20e-6
#: Headroom over the keep-up size.
HEADROOM = 2.0
#: Seconds over which the intake rate is averaged.
RATE_WINDOW = 2.0


class WriteCosts:
    """Fixed seconds per write and seconds per row, fitted to the writes seen (see the module)."""

    def __init__(self, fixed: float = PRIOR_FIXED_SECONDS, per_row: float = PRIOR_ROW_SECONDS) -> None:
        self.prior = (fixed, per_row)
        self.fixed, self.per_row = fixed, per_row
        self.writes = 0
        # Exponentially weighted sums of 1, x, y, x², xy (x = rows, y = seconds).
        self._s = [0.0] * 5

    def observe(self, rows: int, seconds: float) -> None:
        """One write of `rows` rows took `seconds` (wall time of the executor's work)."""
        if rows <= 0 or seconds < 0 or not math.isfinite(seconds):
            return
        x, y = float(rows), seconds
        self._s = [DECAY * s + v for s, v in zip(self._s, (1.0, x, y, x * x, x * y), strict=True)]
        self.writes += 1
        self.fixed, self.per_row = self._fit()

    def _fit(self) -> tuple[float, float]:
        w, sx, sy, sxx, sxy = self._s
        mean_x, mean_y = sx / w, sy / w
        var_x = sxx / w - mean_x * mean_x
        if var_x > (0.05 * mean_x) ** 2:  # sizes varied enough to tell the two costs apart
            per_row = (sxy / w - mean_x * mean_y) / var_x
            fixed = mean_y - per_row * mean_x
            if per_row >= 0 and fixed >= 0:
                return fixed, per_row
        # One size only (or a fit below zero): keep the prior's split of the mean write time.
        prior_fixed, prior_row = self.prior
        share = prior_fixed / (prior_fixed + prior_row * mean_x)
        return mean_y * share, mean_y * (1 - share) / mean_x

    def seconds(self, rows: int) -> float:
        """The expected seconds of a write of `rows` rows."""
        return self.fixed + self.per_row * rows


class IntakeRate:
    """Rows submitted per second, over the last RATE_WINDOW seconds (two half windows)."""

    def __init__(self, now: float) -> None:
        self._start = now
        self._previous = 0.0  # rows/s of the last complete half window
        self._count = 0

    def add(self, now: float, rows: int = 1) -> None:
        self._roll(now)
        self._count += rows

    def rate(self, now: float) -> float:
        self._roll(now)
        elapsed = now - self._start
        current = self._count / elapsed if elapsed > 0 else 0.0
        weight = min(1.0, elapsed / (RATE_WINDOW / 2))
        return weight * current + (1 - weight) * self._previous

    def _roll(self, now: float) -> None:
        if now - self._start >= RATE_WINDOW / 2:
            self._previous = self._count / (now - self._start)
            self._start, self._count = now, 0


@dataclass(frozen=True)
class Target:
    """The rows a type's next bulk aims for, and why (shown on /status and /metrics)."""

    rows: int
    reason: str  # "keep-up" | "latency" | "saturated" | "trickle" (under one row per latency target)
    rate: float  # the intake, rows/s
    fixed: float
    per_row: float


def target(costs: WriteCosts, rate: float, latency: float, slots: int = 1) -> Target:
    """The rows the next bulk should reach before it closes, with `slots` overlapping writes (see the
    module docstring)."""
    cap = int(rate * latency)
    if cap < 1:
        return Target(1, "trickle", rate, costs.fixed, costs.per_row)
    load = rate * costs.per_row
    if load >= slots:
        return Target(cap, "saturated", rate, costs.fixed, costs.per_row)
    keep_up = math.ceil(HEADROOM * rate * costs.fixed / (slots - load))
    if keep_up > cap:
        return Target(cap, "latency", rate, costs.fixed, costs.per_row)
    return Target(max(1, keep_up), "keep-up", rate, costs.fixed, costs.per_row)


#: An idle sink takes a bulk whose intake paused this long: the listeners wait for its results.
#: The collector's timer looks every 10 ms, so such a bulk leaves 20–30 ms after its last message.
IDLE_GAP = 0.02


class TypeSizer:
    """One type's sizing state in the collector (its lock held): the learned costs, the intake,
    the current target, and when a bulk is due although no fixed limit was reached."""

    def __init__(self, latency: float, now: float, slots: int = 1) -> None:
        self.latency = latency
        self.slots = slots
        self.costs = WriteCosts()
        self.intake = IntakeRate(now)
        self.last_add = now
        self.target = target(self.costs, 0.0, latency, slots)

    def added(self, now: float) -> None:
        self.intake.add(now)
        self.last_add = now

    def written(self, rows: int, seconds: float) -> None:
        self.costs.observe(rows, seconds)

    def reached(self, rows: int) -> bool:
        """Whether `rows` reach the target; a trickle has none (its bulks close when intake pauses)."""
        return self.target.reason != "trickle" and rows >= self.target.rows

    def due(self, rows: int, age: float, now: float, sink_idle: bool) -> str | None:
        """Why a bulk of `rows` rows whose oldest message is `age` seconds old closes now, or None
        to let it grow: "latency" at the latency target; while the sink is busy (every write slot
        taken) it grows (group commit); an idle sink takes it at the target size ("target") or when
        intake paused ("idle")."""
        if age >= self.latency:
            return "latency"
        if not sink_idle:
            return None
        self.target = target(self.costs, self.intake.rate(now), self.latency, self.slots)
        if self.reached(rows):
            return "target"
        if now - self.last_add >= IDLE_GAP:
            return "idle"
        return None

    def status(self) -> dict[str, object]:
        t = self.target
        return {"target_rows": t.rows, "reason": t.reason, "intake_per_second": round(t.rate, 1),
                "write_fixed_seconds": round(t.fixed, 4), "write_row_seconds": round(t.per_row, 8),
                "writes_measured": self.costs.writes, "latency_seconds": self.latency, "write_slots": self.slots}
