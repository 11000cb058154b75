"""What the running bridge reports of itself: the one-line summary (the log's line every control
interval and systemd's STATUS) and the listener threads' entries of the status document (/status,
the status page, `mqbridge status`). Read-only views of the supervisor's state, apart from the
supervision itself (`mqbridge.supervision.supervisor`), which assembles the document."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from mqbridge.counters import Counters
from mqbridge.supervision.control import ListenerControls

if TYPE_CHECKING:
    from mqbridge.bulks.collector_limits import CollectorStats
    from mqbridge.observer import Observer


def summary_line(counters: Counters, stats: CollectorStats, slots: Sequence[Any], controls: ListenerControls,
                 sinks: str) -> str:
    """One line of counters: the sinks' summary, threads alive of wanted, messages, the collector."""
    c = counters
    rate = c.gauge("errors_per_second") or 0.0
    alive = sum(1 for s in slots if s.alive)
    wanted = sum(control.wanted for control in controls)
    flushed = ",".join(f"{k}={v}" for k, v in sorted(stats.flushed.items())) or "-"
    return (f"{sinks + ' | ' if sinks else ''}"
            f"threads {alive}/{wanted} created={c.total('listener_threads_created'):.0f} "
            f"errors/s={rate:.2f} | received={c.total('messages_received'):.0f} "
            f"committed={c.total('messages_committed'):.0f} backed_out={c.total('messages_backed_out'):.0f} "
            f"backout_queue={c.total('messages_moved_to_backout'):.0f} | collector {stats.messages} msgs "
            f"{stats.bytes / 1e6:.1f}MB active={stats.active_bulks} flushed[{flushed}] "
            f"spark_write_s={stats.execute_seconds_total:.1f}")


def listener_entries(slots: Sequence[Any], controls: ListenerControls, now: float) -> list[dict[str, Any]]:
    """Each listener thread slot (`supervisor.Slot`) as the status document shows it."""
    listeners = []
    for slot in slots:
        thread = slot.thread
        state = thread.state if thread is not None else None
        control = controls.get(slot.listener)
        wanted = control.wants(slot.index)
        listeners.append({
            "name": slot.name,
            "source": slot.config.source,
            "queue": slot.config.queue,
            "alive": slot.alive,
            "phase": state.phase if state else ("halted" if slot.halted else "restarting" if wanted else "stopped"),
            "units": state.units if state else 0,
            "seconds_since_heartbeat": round(now - state.heartbeat, 1) if state else None,
            "restarts": slot.restarts,
            "last_error": (state.last_error if state and state.last_error else slot.last_error),
            "state": control.state,  # the listener's run-time state: running, paused or stopped
            "retiring": not wanted,  # asked to end: stopped, or beyond a lowered thread count
        })
    return listeners


def observer_fields(observers: Iterable[Observer]) -> dict[str, Any]:
    """What each observer adds to the status document; one that raises adds its error instead."""
    fields: dict[str, Any] = {}
    for observer in observers:
        try:
            fields.update(observer.status_fields())
        except Exception as exc:  # a broken observer must not take the status page down
            fields[type(observer).__name__] = {"error": f"{type(exc).__name__}: {exc}"}
    return fields
