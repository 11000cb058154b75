"""Health of a running bridge: is every listener thread connected, is every sink available, is
Spark reachable?

`health_problems(status)` reads a `Bridge.status()` document (with the "spark" field that
`SparkProbe.status` adds) and lists what is wrong; no problems means healthy (/healthz 200).
A listener paused by the memory guard is alive and connected, so it is healthy: the pause is
reported in the status and the `mqbridge_memory_guard_paused` gauge instead. So is a listener an
operator paused, and the threads of one an operator stopped (or beyond a thread count an operator
lowered) are no problem either: `mqbridge_listener_state` and `/status` show them. A sink whose circuit
breaker is open (`mqbridge.bulks.breaker`) is a problem: its messages wait on their queues.

Nothing here may block the HTTP handler on Spark: the reachability ping runs on its own thread and
is waited for at most `PING_WAIT` seconds; a ping that does not answer in time is reported as such.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

#: Longest time a /status or /healthz request waits for a Spark ping (py4j or Spark Connect).
PING_WAIT = 2.0

# Phases of a listener thread that hold a live connection.
CONNECTED_PHASES = frozenset({"receiving", "processing", "paused"})


def health_problems(status: Mapping[str, Any]) -> list[str]:
    """One line per problem, each naming what is wrong; empty when healthy."""
    problems = []
    if status.get("fatal"):
        problems.append(f"fatal: {status['fatal']}")
    if status.get("stopping"):
        problems.append("bridge is stopping")
    listeners = status.get("listeners", [])
    if not listeners:
        problems.append("no listener threads started")
    for entry in listeners:
        if entry.get("retiring"):  # asked to end by an operator's command (mqbridge.supervision.control)
            continue
        error = f" (last error: {entry['last_error']})" if entry.get("last_error") else ""
        if not entry.get("alive"):
            problems.append(f"listener {entry['name']}: not running, {entry.get('phase', '?')}{error}")
        elif entry.get("phase") not in CONNECTED_PHASES:
            problems.append(f"listener {entry['name']}: not connected, {entry.get('phase', '?')}{error}")
    for name, sink in sorted((status.get("sinks") or {}).items()):
        if not sink.get("available", True):
            wait = sink.get("next_probe_seconds")
            problems.append(f"sink {name}: unavailable since {sink.get('unavailable_since')}, next probe in "
                            f"{'?' if wait is None else f'{wait:.0f}'}s: {sink.get('reason') or 'unknown'}")
    if status.get("gave_up"):
        problems.append(f"gave up: {status['gave_up']}")
    spark = status.get("spark") or {}
    if spark.get("reachable") is False:
        problems.append(f"spark: not reachable: {spark.get('error') or 'unknown error'}")
    return problems


def _ping(session: Any) -> None:
    """A cheap round trip to Spark; raises when it is gone."""
    if type(session).__module__.startswith("pyspark.sql.connect"):
        session.version  # noqa: B018 -- one RPC to the Spark Connect server
        return
    jsc = session.sparkContext._jsc  # None once the SparkContext is stopped
    if jsc is None:
        raise RuntimeError("the SparkContext is stopped")
    if jsc.sc().isStopped():  # one py4j call: the JVM gateway answers
        raise RuntimeError("the SparkContext is stopped")


class SparkProbe:
    """Spark reachability, measured at most every `max_age` seconds and cached in between.

    `session` returns the bridge's SparkSession or None when the bridge has none (nothing it runs
    needs Spark, the session is still starting, or its executors were supplied without Spark): then
    there is nothing to check and `reachable` is None.
    """

    def __init__(self, session: Callable[[], Any], max_age: float, *,
                 ping: Callable[[Any], None] = _ping, clock: Callable[[], float] = time.monotonic) -> None:
        self._session = session
        self._ping = ping
        self._clock = clock
        self.max_age = max_age
        self._lock = threading.Lock()
        self._checked: float | None = None
        self._reachable: bool | None = None
        self._error = ""
        self._pinging: threading.Thread | None = None

    def check(self) -> bool | None:
        """Reachable (True/False), or None without a Spark session. Cached for `max_age`; never
        waits more than PING_WAIT for the ping, which runs on its own thread (one at a time)."""
        with self._lock:
            now = self._clock()
            session = self._session()
            if session is None:
                # Not cached: asking costs nothing, and a session that starts a moment later
                # must be probed at once, not after max_age of "not checked".
                self._reachable, self._error, self._checked = None, "", None
                return None
            if self._checked is not None and now - self._checked < self.max_age:
                return self._reachable
            if self._pinging is None or not self._pinging.is_alive():
                self._pinging = threading.Thread(target=self._ping_once, args=(session,),
                                                 name="spark-health-ping", daemon=True)
                self._pinging.start()
            pinging = self._pinging
        pinging.join(PING_WAIT)
        with self._lock:
            if pinging.is_alive():
                self._reachable = False
                self._error = f"no answer from Spark within {PING_WAIT:.0f}s (the ping is still waiting)"
                self._checked = self._clock()
            return self._reachable

    def _ping_once(self, session: Any) -> None:
        try:
            self._ping(session)
            reachable, error = True, ""
        except Exception as exc:  # any failure of the round trip means unreachable
            lines = str(exc).strip().splitlines()
            reachable, error = False, f"{type(exc).__name__}: {lines[0] if lines else ''}"
        with self._lock:
            self._reachable, self._error, self._checked = reachable, error, self._clock()

    def status(self) -> dict[str, Any]:
        """The status page's "spark" field."""
        reachable = self.check()
        session = self._session()
        return {
            "reachable": reachable,
            "error": self._error,
            "kind": None if session is None else (
                "connect" if type(session).__module__.startswith("pyspark.sql.connect") else "local driver"),
            "checked_seconds_ago": round(self._clock() - self._checked, 1) if self._checked is not None else None,
        }
