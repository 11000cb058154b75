"""The adaptive thread count's control law (`mqbridge.supervision.tuning.decide`) and the tuner's use of
the listener controls: slow start, steady probes, halving under pressure, holding when drained or
when nothing commits, and an operator's count that the tuner leaves alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mqbridge.counters import Counters
from mqbridge.errors import ControlError
from mqbridge.supervision import tuning
from mqbridge.supervision.control import ListenerControls
from mqbridge.supervision.tuning import Climb, ConcurrencyTuner, Sample, decide

S = tuning.SAMPLE_SECONDS


def busy(rate: float, threads: int = 1, **kw: object) -> Sample:
    """A sample of a listener with a backlog: its threads never waited for a message."""
    return Sample(S, rate * S, 0.0, threads, **kw)  # type: ignore[arg-type]


def run(climb: Climb, threads: int, rates: list[float], *, ceiling: int = 8, start: float = 0.0,
        target: float | None = 1.0) -> list[tuple[float, int, str]]:
    """Feeds one sample per rate; applies each change as the tuner does. Returns (time, threads, why)."""
    changes = []
    now = start
    for rate in rates:
        now += S
        verdict = decide(climb, threads, ceiling, busy(rate, threads), target, now)
        if verdict is not None:
            threads, why = verdict
            climb.changed()
            changes.append((now, threads, why))
    return changes


def test_slow_start_doubles_while_the_rate_rises_and_undoes_the_doubling_that_did_not_help():
    climb = Climb()
    # 1 thread: 2 samples judged, then 2 threads (one sample skipped, two judged), 4, 8: no gain at 8
    rates = [1000, 1000] + [1900] * 3 + [3500] * 3 + [3600] * 3
    changes = run(climb, 1, rates)
    assert [threads for _, threads, _ in changes] == [2, 4, 8, 4]
    assert "doubling" in changes[0][2] and "slow start: 1 -> 2 threads" in changes[1][2]
    assert "4 -> 8 threads: 3,500 -> 3,600 msg/s, less than 10% more: back to 4" in changes[3][2]
    assert climb.phase == "steady" and not climb.judging


def test_a_doubling_is_judged_on_what_was_read_after_it_one_round_later():
    # Messages take 3 s from receipt to commit: what commits in the 3 s after a doubling was read before
    # it, while the new threads connected (a dip); the doubling shows only after that round.
    climb, threads, verdicts = Climb(), 1, []
    rates = [1000, 1000] + [100, 100] + [1900] * 3
    for second, rate in enumerate(rates, start=1):
        verdict = decide(climb, threads, 8, busy(rate, threads, latency=3.0), 4.0, float(second))
        if verdict:
            threads, why = verdict
            climb.changed()
            verdicts.append((second, threads, why))
    assert [(t, n) for t, n, _ in verdicts] == [(2, 2), (6, 4)], verdicts  # judged on 5 and 6, not on the dip
    assert "1 -> 2 threads: 1,000 -> 1,900 msg/s; doubling again" in verdicts[1][2]


def test_steady_probes_one_more_thread_after_the_probe_interval_and_keeps_it_only_if_it_pays():
    climb = Climb(phase="steady", next_probe=tuning.PROBE_SECONDS)
    samples_to_probe = int(tuning.PROBE_SECONDS / S)
    look = tuning.SKIP_SAMPLES["steady"] + tuning.JUDGE_SAMPLES["steady"]  # skipped, then judged
    changes = run(climb, 4, [4000] * samples_to_probe + [4400] * look)  # +10 %: kept
    assert [threads for _, threads, _ in changes] == [5]
    assert "probing" in changes[0][2] and not climb.judging
    after = changes[0][0] + look * S
    changes = run(climb, 5, [4400] * samples_to_probe + [4450] * look, start=after)  # +1 %: undone
    assert [threads for _, threads, _ in changes] == [6, 5]
    assert "less than 5% more: back to 5" in changes[1][2]


def test_the_ceiling_bounds_every_growth():
    climb = Climb()
    changes = run(climb, 1, [1000, 1000] + [2000] * 3 + [4000] * 3 + [8000] * 6, ceiling=3)
    assert [threads for _, threads, _ in changes] == [2, 3]
    assert max(threads for _, threads, _ in changes) == 3


@pytest.mark.parametrize("sample, why", [
    (busy(5000, 8, backpressure=True), "the collector's memory is full"),
    (busy(5000, 8, latency=4.5), "receipt-to-commit 4.5 s on average, above 4 x the 1 s latency target"),
])
def test_pressure_halves_the_threads_at_once(sample: Sample, why: str):
    climb = Climb(phase="steady")
    threads, reason = decide(climb, 8, 8, sample, 1.0, 10.0) or (0, "")
    assert threads == 4 and reason.startswith(why) and reason.endswith("halved")
    assert climb.phase == "steady" and not climb.judging
    assert decide(Climb(), 1, 8, sample, 1.0, 10.0) is None  # one thread is the least


def test_a_growth_being_judged_stops_the_latency_guard_not_the_memory_guard():
    # the first commits after a start hold the Spark session's start: the doubling's verdict comes first
    judging = Climb(phase="start", judging=True, base_rate=3000, base_threads=4)
    assert decide(judging, 8, 8, busy(5000, 8, latency=4.5), 1.0, 10.0) is None and judging.judging
    verdict = decide(judging, 8, 8, busy(5000, 8, backpressure=True), 1.0, 10.0)
    assert verdict is not None and verdict[0] == 4 and not judging.judging


def feed(climb: Climb, threads: int, latency_of: Callable[[int], float], times: range,
         rate_of: Callable[[int], float] = lambda threads: 2000) -> list[tuple[int, int, str]]:
    """One busy sample per second of `times`, each with the receipt-to-commit time `latency_of(threads)`
    and the rate `rate_of(threads)`; applies each change as the tuner does. Returns (time, threads, why)."""
    changes = []
    for now in times:
        sample = busy(rate_of(threads), threads, latency=latency_of(threads))
        verdict = decide(climb, threads, 8, sample, 1.0, float(now))
        if verdict is not None:
            threads = verdict[0]
            climb.changed()
            changes.append((now, threads, verdict[1]))
    return changes


def test_pressure_halves_once_per_round_and_again_only_once_the_halving_is_judged():
    # Queueing: receipt-to-commit 1.5 s per thread, above the 4 s bound (4 x a 1 s target) at 8 and 4
    # threads. The halving at t = 10 (12 s) is judged on what was read after it: from t = 22, after two
    # skipped samples, five samples (t = 22-26; 6 s, down by half); the next halving comes at t = 27.
    changes = feed(Climb(), 8, lambda threads: 1.5 * threads, range(10, 50))  # before the next probe
    assert [(now, threads) for now, threads, _ in changes] == [(10, 4), (27, 2)]
    assert "receipt-to-commit 12.0 s on average, above 4 x the 1 s latency target: halved" in changes[0][2]


def test_a_halving_that_leaves_the_latency_where_it_was_is_undone_and_that_latency_taken_as_the_sinks():
    # The sink takes 5 s whatever the count: halving 8 -> 4 at t = 10 does not bring it down, so at t = 19
    # (two samples skipped, two before the round of 5 s is over, five judged) the count goes back to 8
    climb = Climb()
    changes = feed(climb, 8, lambda threads: 5.0, range(10, 60))
    assert [(now, threads) for now, threads, _ in changes] == [(10, 4), (19, 8)]
    assert ("8 -> 4 threads: receipt-to-commit 5.0 -> 5.0 s at 2,000 -> 2,000 msg/s: the sink's time, not the "
            "threads' queueing: back to 8") in changes[1][2]
    # then only more queueing on top of that time halves: above 2 x 5 s, not at 9 s
    assert decide(climb, 8, 8, busy(2000, 8, latency=9.0), 1.0, 60.0) is None
    verdict = decide(climb, 8, 8, busy(2000, 8, latency=11.0), 1.0, 61.0)
    assert verdict is not None and verdict[0] == 4 and "above 2 x the sink's 5.0 s: halved" in verdict[1]
    # and a sink that meets the bound again is forgotten: the bound is the target's again
    climb = Climb(sink_latency=5.0)
    assert decide(climb, 8, 8, busy(2000, 8, latency=3.0), 1.0, 0.0) is None and climb.sink_latency == 0.0


def test_a_halving_that_shortens_the_wait_only_by_making_smaller_bulks_at_a_lower_rate_is_undone():
    # Two bridges on one table (docs/scaling.md): 5.8 s at 4 threads and 2,000 msg/s, 4.3 s at 2 threads
    # but 1,100 msg/s. Judged at t = 20 (the round of 5.8 s, then five samples): back to 4; the 5.8 s is
    # then accepted at 4 threads: the guard waits for twice that, and does not swing between 4 and 2
    rates = {4: 2000.0, 2: 1100.0}
    latencies = {4: 5.8, 2: 4.3}
    climb = Climb()
    changes = feed(climb, 4, latencies.__getitem__, range(10, 40), rates.__getitem__)
    assert [(now, threads) for now, threads, _ in changes] == [(10, 2), (20, 4)]
    assert "receipt-to-commit 5.8 -> 4.3 s at 2,000 -> 1,100 msg/s" in changes[1][2]
    assert climb.sink_latency == pytest.approx(5.8)


def test_a_round_is_bounded_so_a_sink_that_took_minutes_does_not_silence_the_guard_as_long():
    climb = Climb()
    assert decide(climb, 8, 8, busy(2000, 8, backpressure=True, latency=600.0), 1.0, 0.0) is not None
    assert decide(climb, 4, 8, busy(2000, 4, backpressure=True), 1.0, tuning.ROUND_MAX_SECONDS - 1) is None
    assert decide(climb, 4, 8, busy(2000, 4, backpressure=True), 1.0, tuning.ROUND_MAX_SECONDS) is not None


def test_a_drained_queue_holds_the_count_and_gives_one_back_after_the_decay_time():
    climb = Climb()
    drained = Sample(S, 500 * S, 0.9 * S * 4, 4)  # its 4 threads waited 90 % of the time
    now, changes = 0.0, []
    while now < tuning.IDLE_DECAY_SECONDS + 2 * S:
        now += S
        verdict = decide(climb, 4, 8, drained, 1.0, now)
        if verdict:
            changes.append(verdict)
    assert len(changes) == 1 and changes[0][0] == 3 and "drained" in changes[0][1]


def test_a_drained_stretch_puts_the_climb_back_in_slow_start_so_the_next_backlog_doubles():
    # steady at 4 threads; an hour of a drained queue gives a thread back; then a burst of a backlog
    climb = Climb(phase="steady", next_probe=10_000.0)
    drained = Sample(S, 50 * S, 0.9 * S * 4, 4)
    now, threads = 0.0, 4
    while now < tuning.IDLE_DECAY_SECONDS + S:
        now += S
        verdict = decide(climb, threads, 8, drained, 1.0, now)
        if verdict:
            threads = verdict[0]
            climb.changed()
    assert threads == 3 and climb.phase == "start"
    changes = run(climb, threads, [3000] * 3 + [5500] * 3, start=now)
    assert [t for _, t, _ in changes] == [6, 8], changes  # doubled at once, not one thread per probe interval
    assert "slow start" in changes[0][2]


def test_units_short_of_their_batch_hold_the_count_and_a_growth_waits_for_whole_units():
    # A slow sink: the threads hold their units and wait for no message, but the units come out short
    # (no message ready): a trickle. Its rate is the arrivals', whatever the threads.
    climb = Climb()
    trickle = Sample(S, 75 * S, 0.0, 1, units=4, short=4)
    for second in range(10):
        assert decide(climb, 1, 8, trickle, 1.0, float(second)) is None
    assert climb.phase == "start" and not climb.judging
    # a backlog: whole units; a doubling is made, and judged only on whole units again
    changes = run(climb, 1, [1000, 1000], start=10.0)
    assert [t for _, t, _ in changes] == [2] and climb.judging
    climb.changed()
    for second in range(12, 20):
        assert decide(climb, 2, 8, Sample(S, 16 * S, 0.0, 2, units=4, short=3), 1.0, float(second)) is None
    assert climb.judging  # not "75 -> 16 msg/s: back to 1"
    changes = run(climb, 2, [1900] * 3, start=20.0)
    assert [t for _, t, _ in changes] == [4] and "slow start: 1 -> 2 threads: 1,000 -> 1,900 msg/s" in changes[0][2]


def test_nothing_committed_holds_and_forgets_the_growth_being_judged():
    climb = Climb(judging=True, base_rate=3000, base_threads=2, window=[busy(3000, 4)])
    assert decide(climb, 4, 8, Sample(S, 0, 0, 4), 1.0, 5.0) is None
    assert not climb.judging and climb.window == []


def controls() -> ListenerControls:
    return ListenerControls([("amq", "/queue/adaptive", 1, 8), ("amq", "/queue/fixed", 3)])


def test_the_tuner_sets_an_adaptive_entry_and_never_a_fixed_one_nor_one_an_operator_fixed():
    c = controls()
    adaptive, fixed = c.get("amq:/queue/adaptive"), c.get("amq:/queue/fixed")
    assert (adaptive.adaptive, fixed.adaptive) == (True, False)
    assert c.tune(adaptive.name, 4, "slow start") and adaptive.threads == 4 and adaptive.tuning == "slow start"
    assert c.tune(adaptive.name, 99, "more") and adaptive.threads == 8  # its ceiling
    assert not c.tune(fixed.name, 5, "no") and fixed.threads == 3
    c.command(adaptive.name, "pause")
    assert not c.tune(adaptive.name, 2, "paused: the operator's")
    c.command(adaptive.name, "resume")
    outcome = c.command(adaptive.name, "threads", 2)
    assert outcome.changed and "fixed: no longer adaptive" in outcome.message
    assert not adaptive.adaptive and not c.tune(adaptive.name, 6, "after the command") and adaptive.threads == 2
    with pytest.raises(ControlError):
        c.command(adaptive.name, "threads", 0)


def test_the_tuner_samples_the_counters_and_changes_the_count_through_the_controls():
    c, counters = controls(), Counters()
    name = "amq:/queue/adaptive"
    tuner = ConcurrencyTuner(c, counters, latency_targets=lambda: {name: 1.0}, backpressure_waits=lambda: 0,
                             alive=lambda _name: c.get(name).threads)
    now = 0.0
    seen = []
    for _ in range(12):  # a backlog: 2,000 msg/s per thread, never waiting for a message
        counters.inc("messages_committed", 2000 * S * c.get(name).threads, listener=name, queue="/queue/adaptive")
        counters.observe_many("receipt_to_commit_seconds", [0.5] * 10, listener=name, queue="/queue/adaptive")
        tuner.step(now)
        seen.append(c.get(name).threads)
        now += S
    assert seen[-1] >= 4 and seen == sorted(seen)
    assert counters.total("listener_threads_tuned", listener=name, direction="up") >= 2
    assert c.get(name).tuning.startswith("slow start") and c.get(name).tuned_at
    assert c.get("amq:/queue/fixed").threads == 3 and counters.total("listener_threads_tuned",
                                                                      listener="amq:/queue/fixed") == 0


def test_a_listener_whose_bulks_land_every_few_seconds_is_sampled_from_commit_to_commit_and_grows():
    # A slow sink: a bulk of 500 per thread lands every 3 s, nothing in between (three bridges on one
    # table, docs/scaling.md). Seconds without a commit are not samples that say "nothing committed".
    c, counters = controls(), Counters()
    name = "amq:/queue/adaptive"
    tuner = ConcurrencyTuner(c, counters, latency_targets=lambda: {name: 1.0}, backpressure_waits=lambda: 0,
                             alive=lambda _name: c.get(name).threads)
    for second in range(40):
        if second % 3 == 0:
            counters.inc("messages_committed", 500 * c.get(name).threads, listener=name, queue="/queue/adaptive")
            counters.observe_many("receipt_to_commit_seconds", [2.0] * 10, listener=name, queue="/queue/adaptive")
        tuner.step(float(second))
    assert c.get(name).threads >= 4, c.get(name).tuning
    # and a listener that commits nothing for longer holds: its next sample says so
    before = c.get(name).threads
    for second in range(40, 40 + int(tuning.QUIET_MAX_SECONDS) + 2):
        tuner.step(float(second))
    assert c.get(name).threads == before and not tuner.climbs[name].judging


def early(c: ListenerControls, counters: Counters, *, waits: Callable[[], int] = lambda: 0,
          alive: Callable[[str], int] | None = None) -> ConcurrencyTuner:
    name = "amq:/queue/adaptive"
    return ConcurrencyTuner(c, counters, latency_targets=lambda: {name: 1.0}, backpressure_waits=waits,
                            alive=alive or (lambda _name: c.get(name).threads))


def read_units(counters: Counters, threads: int, *, waited: float = 0.0, short: bool = False) -> None:
    """`threads` new threads each read two units of 500 (`short`: of 30, no more message was ready);
    `waited` thread-seconds waiting for messages."""
    labels = {"listener": "amq:/queue/adaptive", "queue": "/queue/adaptive"}
    counters.inc("messages_received", (60 if short else 1000) * threads, **labels)
    counters.inc("listener_wait_seconds", waited, **labels)
    counters.inc("listener_units_read", 2 * threads, **labels)
    counters.inc("listener_units_short", 2 * threads if short else 0, **labels)


def test_before_the_first_commit_a_backlog_doubles_the_threads_up_to_half_the_ceiling():
    # The sink's first write takes seconds (the Spark session starting); the threads read whole units at
    # once and hold them. Each new thread's reading shows the backlog goes on.
    c, counters = controls(), Counters()
    name = "amq:/queue/adaptive"
    tuner = early(c, counters)
    seen, read_by = [], 0
    for second in range(12):
        new = c.get(name).threads - read_by
        if new:  # the threads started since the last change read their units (then hold them)
            read_units(counters, new)
            read_by += new
        tuner.step(float(second))
        seen.append(c.get(name).threads)
    assert seen[-1] == 4 and seen == sorted(seen), seen  # half of threads_max 8: the last doubling is judged
    assert c.get(name).tuning.startswith("before the first commit: 1,000 messages read")
    assert counters.total("listener_threads_tuned", listener=name, direction="up") == 2
    # the first commits: the judged climb takes over from 4 (and may double to 8 from the rate)
    for second in range(12, 24):
        counters.inc("messages_committed", 3000 * S * c.get(name).threads, listener=name, queue="/queue/adaptive")
        counters.observe_many("receipt_to_commit_seconds", [0.5] * 10, listener=name, queue="/queue/adaptive")
        tuner.step(float(second))
    assert c.get(name).threads == 8 and c.get(name).tuning.startswith("slow start: 12,000 msg/s with 4 threads")


@pytest.mark.parametrize("case", ["drained", "a trickle", "not connected yet", "memory full", "committed before"])
def test_before_the_first_commit_the_threads_hold_without_a_backlog(case: str):
    c, counters = controls(), Counters()
    name = "amq:/queue/adaptive"
    waits = iter(range(100))
    tuner = early(c, counters, waits=(lambda: next(waits)) if case == "memory full" else (lambda: 0),
                  alive=(lambda _name: 0) if case == "not connected yet" else None)
    if case == "committed before":  # then an outage: nothing commits, the threads hold their units
        counters.inc("messages_committed", 500, listener=name, queue="/queue/adaptive")
    for second in range(10):
        # a trickle: the threads hold their short units while the Spark session starts, waiting for no message
        read_units(counters, 1, waited=0.5 if case == "drained" else 0.0, short=case == "a trickle")
        tuner.step(float(second))
    assert c.get(name).threads == 1 and counters.total("listener_threads_tuned", listener=name) == 0


def test_the_first_round_of_commits_after_a_start_does_not_halve_for_latency():
    # Four threads (grown before the first commit) held their units while the Spark session started:
    # the first commits' receipt-to-commit is 8 s, over the 4 s bound, and says nothing of the count.
    c, counters = controls(), Counters()
    name = "amq:/queue/adaptive"
    c.tune(name, 4, "before the first commit")
    tuner = early(c, counters)
    labels = {"listener": name, "queue": "/queue/adaptive"}
    tuner.step(0.0)
    for second in range(1, 9):
        counters.inc("messages_committed", 3000, **labels)
        counters.observe_many("receipt_to_commit_seconds", [8.0] * 10, **labels)
        tuner.step(float(second))
    assert c.get(name).threads >= 4, c.get(name).tuning
    # after the round (and the verdict on the doubling made meanwhile), queueing that goes on halves
    seen = []
    for second in range(9, 24):
        counters.inc("messages_committed", 3000, **labels)
        counters.observe_many("receipt_to_commit_seconds", [9.0] * 10, **labels)
        tuner.step(float(second))
        seen.append(c.get(name).tuning)
    assert any("above 4 x the 1 s latency target: halved" in why for why in seen), seen
