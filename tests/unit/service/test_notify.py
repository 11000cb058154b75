"""sd_notify against a real AF_UNIX datagram socket; the watchdog's health gate with real threads."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mqbridge.counters import Counters
from mqbridge.service.notify import BridgeNotifier, Notifier
from mqbridge.supervision.supervisor import Slot


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield path, sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def test_sends_key_value_lines_as_one_datagram(notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    assert Notifier(path).notify(READY=1, STATUS="a\nmulti-line   status")
    assert received(sock) == ["READY=1", "STATUS=a multi-line status"]


def test_abstract_namespace_socket() -> None:
    name = f"mqbridge-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert Notifier.from_environment({"NOTIFY_SOCKET": "@" + name}).notify(STOPPING=1)
        assert received(sock) == ["STOPPING=1"]


def test_no_socket_no_op_and_a_failure_never_raises(tmp_path: Path) -> None:
    assert not Notifier.from_environment({}).enabled
    assert Notifier.from_environment({}).notify(READY=1) is False
    assert Notifier(str(tmp_path / "nobody-listens")).notify(READY=1) is False


def test_watchdog_settings_from_environment() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "3000000"}
    assert Notifier.from_environment(env).watchdog_interval == pytest.approx(1.0)
    assert Notifier.from_environment({**env, "WATCHDOG_PID": str(os.getpid())}).watchdog_interval == pytest.approx(1.0)
    assert Notifier.from_environment({**env, "WATCHDOG_PID": "1"}).watchdog_interval is None  # not ours
    assert Notifier.from_environment({**env, "WATCHDOG_USEC": "x"}).watchdog_interval is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fake_bridge(threads: list[threading.Thread]) -> Any:
    """What the notifier reads of a bridge: slots with threads, its summary line, the stop event."""
    slots = [Slot(config=None, index=i, name=f"q#{i}", thread=t) for i, t in enumerate(threads, 1)]  # type: ignore[arg-type]
    return SimpleNamespace(slots=slots, counters=Counters(), stop_event=threading.Event(),
                           summary=lambda: f"threads {len(slots)}/{len(slots)} committed=0",
                           config=SimpleNamespace(bridge=SimpleNamespace(shutdown_timeout=30.0)))


def test_watchdog_pings_when_due_while_the_control_loop_runs_even_with_a_stuck_or_dead_listener(
        notify_socket: tuple[str, socket.socket]) -> None:
    path, sock = notify_socket
    sock.settimeout(0.2)
    release = threading.Event()
    alive = threading.Thread(target=release.wait, daemon=True)
    alive.start()
    clock = Clock()
    hooks = BridgeNotifier(Notifier(path, watchdog_usec=3_000_000), clock=clock)
    bridge = fake_bridge([alive])

    def messages() -> list[str]:
        out = []
        try:
            while True:
                out.append(sock.recv(4096).decode())
        except TimeoutError:
            return out

    try:
        hooks.on_wake(bridge)  # before READY=1 systemd has not armed the watchdog
        assert messages() == []
        hooks.on_ready(bridge)
        assert messages() == ["READY=1\nSTATUS=threads 1/1 committed=0", "WATCHDOG=1"]
        clock.now += 0.5
        hooks.on_wake(bridge)  # not due yet (every 1 s)
        assert messages() == []
        clock.now += 0.6
        hooks.on_wake(bridge)
        assert messages() == ["WATCHDOG=1"]

        # A stuck listener, then a dead one: the control loop still wakes, so the pings go on
        # (the listener shows in /healthz and STATUS; killing the process would cure nothing)
        bridge.slots[0].reported_stuck = True
        clock.now += 2
        hooks.on_wake(bridge)
        assert messages() == ["WATCHDOG=1"]
        bridge.slots[0].reported_stuck = False
        release.set()
        alive.join()
        clock.now += 1.1
        hooks.on_wake(bridge)
        assert messages() == ["WATCHDOG=1"]
        # Shutting down: no pings (systemd's TimeoutStopSec applies)
        bridge.stop_event.set()
        clock.now += 1.1
        hooks.on_wake(bridge)
        assert messages() == []
    finally:
        release.set()
    hooks.on_stopping(bridge)
    assert messages()[0].startswith("STOPPING=1\nSTATUS=draining (up to 30s)")
