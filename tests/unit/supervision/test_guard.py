"""The memory guard: pause above max_rss, resume below 90 % of it, say so in counters and logs."""

from __future__ import annotations

import logging
import threading

import pytest

from mqbridge.counters import Counters
from mqbridge.gate import IntakeGate
from mqbridge.supervision.guard import RESUME_RATIO, MemoryGuard

MB = 2**20


class FakeRss:
    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def test_pauses_above_the_limit_and_resumes_only_below_the_hysteresis_threshold(
        caplog: pytest.LogCaptureFixture) -> None:
    # Given a guard at 100 MB
    counters, rss = Counters(), FakeRss(50 * MB)
    guard = MemoryGuard(100 * MB, counters, rss=rss)
    caplog.set_level(logging.INFO, logger="mqbridge.guard")
    guard.check()
    assert not guard.paused and counters.gauge("memory_guard_paused") == 0

    # When memory goes above the limit, intake pauses, once, with one warning
    rss.value = 101 * MB
    guard.check()
    guard.check()
    assert guard.paused and not guard.gate.is_open
    assert counters.gauge("memory_guard_paused") == 1
    assert counters.total("memory_guard_pauses") == 1
    assert [r.levelname for r in caplog.records] == ["WARNING"]

    # Between 90 % and 100 % it stays paused (no flapping)
    rss.value = int(RESUME_RATIO * 100 * MB) + 1
    guard.check()
    assert guard.paused

    # Below 90 % it resumes, with one info line
    rss.value = int(RESUME_RATIO * 100 * MB) - 1
    guard.check()
    guard.check()
    assert not guard.paused and guard.gate.is_open
    assert counters.gauge("memory_guard_paused") == 0
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    status = guard.status()
    assert status["enabled"] and status["pauses"] == 1 and status["rss"] == rss.value
    assert status["resume_below"] == int(RESUME_RATIO * 100 * MB)


def test_raising_the_limit_resumes_and_no_limit_never_pauses() -> None:
    counters, rss = Counters(), FakeRss(500 * MB)
    guard = MemoryGuard(100 * MB, counters, rss=rss)
    guard.check()
    assert guard.paused
    guard.set_limit(1000 * MB)
    guard.check()
    assert not guard.paused
    guard.set_limit(None)
    rss.value = 10_000 * MB
    guard.check()
    assert not guard.paused and guard.status()["enabled"] is False


def test_disabling_a_paused_guard_opens_the_gate() -> None:
    guard = MemoryGuard(1, Counters(), rss=FakeRss(10 * MB))
    guard.check()
    assert guard.paused
    guard.set_limit(None)
    guard.check()
    assert not guard.paused


def test_gate_wakes_waiters_when_opened() -> None:
    gate = IntakeGate()
    assert gate.wait(0)
    gate.close()
    assert not gate.wait(0.01)
    woke = threading.Event()

    def waiter() -> None:
        if gate.wait(10):
            woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    gate.open()
    thread.join(5)
    assert woke.is_set()
