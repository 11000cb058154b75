"""A listener thread a test started on its own, and how the test ends it (`RunningListener.finish`)."""

from __future__ import annotations

from collections.abc import Callable

from mqbridge.bulks.collector import BulkCollector
from mqbridge.loop.listener import ListenerThread
from tests.support.waiting import wait_until


class RunningListener:
    """Base of the harnesses that start one `ListenerThread` (`thread`) feeding `collector`."""

    thread: ListenerThread
    collector: BulkCollector

    def finish(self, until: Callable[[], bool] | None = None, timeout: float = 20.0) -> BaseException | None:
        """Stop the listener once `until` holds (without `until`, once it ended by itself); its failure."""
        if until is None:
            wait_until(lambda: not self.thread.is_alive(), timeout, "the listener to end")
        else:
            wait_until(lambda: until() or not self.thread.is_alive(), timeout, "the scenario")
        self.thread.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "listener thread did not end"
        self.collector.close(5)
        return self.thread.failure
