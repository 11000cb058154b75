"""The live progress line of `mqbridge run --until-idle` on a terminal.

On a terminal the control thread's per-tick summary (a log line every `control_interval` in a
service's journal) becomes one line rewritten in place: received, committed, in flight, backed
out, the commit rate, and any unavailable sink. A log record clears the line before it is printed
and the next tick draws it again, so warnings stay readable. Not used when stderr is not a
terminal (a service, a pipe, CI): the summary stays a log line there.
"""

from __future__ import annotations

import logging
import time
from typing import TextIO

from mqbridge.observer import BridgeView, Observer

CLEAR = "\r\x1b[K"  # back to the line's start, erase to its end


class ProgressLine(Observer, logging.Filter):
    """Draws the progress line on `stream` every tick; as a logging filter on the handlers that
    write to the same stream, clears it before each record."""

    def __init__(self, stream: TextIO) -> None:
        Observer.__init__(self)
        logging.Filter.__init__(self)
        self.stream = stream
        self._drawn = False
        self._last: tuple[float, float] | None = None  # (monotonic time, committed) at the last tick

    def attach(self) -> ProgressLine:
        """Clear the line before every record a root handler writes to our stream."""
        for handler in logging.getLogger().handlers:
            if getattr(handler, "stream", None) is self.stream:
                handler.addFilter(self)
        return self

    def detach(self) -> None:
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if self._drawn:
            self.stream.write(CLEAR)
            self._drawn = False
        return True

    def on_tick(self, bridge: BridgeView) -> None:
        self.draw(bridge)

    def on_stopping(self, bridge: BridgeView) -> None:
        self.draw(bridge)
        self.stream.write("\n")
        self.stream.flush()
        self._drawn = False

    def draw(self, bridge: BridgeView) -> None:
        self.stream.write(CLEAR + self.line(bridge))
        self.stream.flush()
        self._drawn = True

    def line(self, bridge: BridgeView) -> str:
        c = bridge.counters
        committed = c.total("messages_committed")
        now = time.monotonic()
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = (committed - self._last[1]) / (now - self._last[0])
        self._last = (now, committed)
        held = bridge.collector.stats().messages
        text = (f"received {c.total('messages_received'):.0f} | committed {committed:.0f} ({rate:,.0f}/s) | "
                f"in flight {held} | backed out {c.total('messages_backed_out'):.0f} | "
                f"to backout queue {c.total('messages_moved_to_backout'):.0f}")
        sinks = bridge.breakers.summary() if bridge.breakers is not None else ""
        return f"{text} | {sinks}" if sinks else text
