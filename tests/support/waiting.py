"""Waiting with a deadline: how tests synchronise on what another thread or process does
(STYLE.md: events, joins and polling with deadlines, never bare sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float, what: str, *, every: float = 0.1) -> None:
    """Call `predicate` until it returns something true; TimeoutError naming `what` and `timeout`
    if it has not after `timeout` seconds.

    The pauses start at a millisecond and double up to `every` seconds: a condition met at once is
    seen at once, and a costly one (a Spark read, an HTTP request) is not asked more than needed.
    """
    deadline = time.monotonic() + timeout
    pause = 0.001
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, every)
