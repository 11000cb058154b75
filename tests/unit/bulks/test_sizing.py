"""The bulk sizing model: learned write costs, the intake rate, the target and its reason."""

from __future__ import annotations

import pytest

from mqbridge.bulks.sizing import IntakeRate, WriteCosts, target


def test_costs_are_learned_from_writes_of_different_sizes() -> None:
    costs = WriteCosts()
    for rows in (500, 2000, 1000, 4000, 3000, 800) * 3:
        costs.observe(rows, 0.35 + 40e-6 * rows)
    assert costs.fixed == pytest.approx(0.35, rel=1e-6)
    assert costs.per_row == pytest.approx(40e-6, rel=1e-6)
    assert costs.seconds(10_000) == pytest.approx(0.75, rel=1e-6)


def test_writes_of_one_size_keep_the_prior_split_of_their_mean() -> None:
    costs = WriteCosts(fixed=0.2, per_row=20e-6)
    for _ in range(5):
        costs.observe(1000, 0.44)  # the prior says 0.22: everything took twice as long
    assert costs.fixed == pytest.approx(0.4)
    assert costs.per_row == pytest.approx(40e-6)


def test_recent_writes_count_most() -> None:
    costs = WriteCosts()
    for rows in (1000, 3000) * 10:
        costs.observe(rows, 1.0 + 100e-6 * rows)  # a cold JVM
    for rows in (1000, 3000) * 20:
        costs.observe(rows, 0.1 + 10e-6 * rows)  # warm
    assert costs.fixed == pytest.approx(0.1, abs=0.02)
    assert costs.per_row == pytest.approx(10e-6, rel=0.2)


def test_nonsense_measurements_are_ignored() -> None:
    costs = WriteCosts()
    costs.observe(0, 1.0)
    costs.observe(10, float("nan"))
    costs.observe(10, -1.0)
    assert costs.writes == 0 and (costs.fixed, costs.per_row) == costs.prior


def test_the_intake_rate_follows_the_submits() -> None:
    rate = IntakeRate(now=0.0)
    for i in range(3000):  # 1000 rows/s for 3 s
        rate.add(i / 1000)
    assert rate.rate(3.0) == pytest.approx(1000, rel=0.05)
    assert rate.rate(5.0) == pytest.approx(0, abs=1)  # nothing for two windows


def test_the_target_keeps_up_with_headroom() -> None:
    costs = WriteCosts(fixed=0.2, per_row=20e-6)
    chosen = target(costs, rate=10_000, latency=2.0)
    # keep-up: 10000 × 0.2 / (1 − 0.2) = 2500 rows; twice that
    assert (chosen.rows, chosen.reason) == (5000, "keep-up")
    # the write of the target must be shorter than its rows take to arrive
    assert costs.seconds(chosen.rows) < chosen.rows / 10_000


def test_overlapping_writes_keep_up_with_smaller_bulks_and_a_faster_intake() -> None:
    costs = WriteCosts(fixed=0.2, per_row=100e-6)
    # one write at a time: 20,000 rows/s × 100 µs = 2 s of writing per second, no size keeps up
    assert target(costs, rate=20_000, latency=10.0).reason == "saturated"
    # two overlapping writes, each allowed twice as long: 20000 × 0.2 / (2 − 2)... still saturated
    assert target(costs, rate=20_000, latency=10.0, slots=2).reason == "saturated"
    # at 15,000 rows/s: 15000 × 0.2 / (2 − 1.5) = 6000 rows, twice that
    chosen = target(costs, rate=15_000, latency=10.0, slots=2)
    assert (chosen.rows, chosen.reason) == (12_000, "keep-up")
    # two writes of the target, each taking its time, keep up with the rows arriving meanwhile
    assert costs.seconds(chosen.rows) < 2 * chosen.rows / 15_000
    # and with one write at a time the same intake cannot be kept up with
    assert target(costs, rate=15_000, latency=10.0).reason == "saturated"


def test_the_latency_target_caps_the_bulk() -> None:
    costs = WriteCosts(fixed=0.2, per_row=20e-6)
    chosen = target(costs, rate=10_000, latency=0.3)
    assert (chosen.rows, chosen.reason) == (3000, "latency")


def test_an_intake_no_size_keeps_up_with_is_saturated() -> None:
    costs = WriteCosts(fixed=0.2, per_row=100e-6)
    chosen = target(costs, rate=20_000, latency=1.0)
    assert (chosen.rows, chosen.reason) == (20_000, "saturated")


def test_a_trickle_gets_bulks_of_one() -> None:
    chosen = target(WriteCosts(), rate=0.2, latency=2.0)
    assert (chosen.rows, chosen.reason) == (1, "trickle")
