"""Running as a service, on the real parts (ActiveMQ, local Spark, the real `mqbridge run`
process): sd_notify over a real AF_UNIX datagram socket, SIGTERM mid-stream, SIGHUP reloads, and
the Windows service controller driving a real bridge in-process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from mqbridge.service.controller import RUNNING, STOP_PENDING, STOPPED, ServiceController
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import amq_bridge, listener_toml, read_table
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

TAG = '''
from mqbridge import hookimpl

VERSION = "{version}"


def tag(message):
    message.headers["plugin_version"] = VERSION
    return message


@hookimpl
def mqbridge_register_preprocessors(registry):
    registry.add("tag", lambda options: tag)
'''


def write_config(tmp_path: Path, queue: str, *, control_interval: str = "1s", shutdown_timeout: str = "60s",
                 preprocessors: str | None = None) -> Path:
    """A bridge.toml for one STOMP queue of raw "orders"; returns its path."""
    body = ('\n[types.orders]\nbulk_size = "256KB"\nbulk_timeout = "500ms"\n'
            + listener_toml(queue, "orders", threads=2, batch=200, preprocessors=preprocessors))
    toml = amq_bridge(tmp_path, body).set("bridge", control_interval=control_interval,
                                          shutdown_timeout=shutdown_timeout)
    return toml.write(tmp_path / "bridge.toml")


class BridgeProcess:
    """`python -m mqbridge run` with its output collected line by line."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "mqbridge", "run", "--config", str(config)], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read, name="bridge-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def has(self, text: str, after: int = 0) -> bool:
        return any(text in line for line in self.lines[after:])

    def wait_for_line(self, text: str, timeout: float, after: int = 0) -> None:
        wait_until(lambda: self.has(text, after) or self.proc.poll() is not None, timeout, repr(text))
        assert self.has(text, after), f"{text!r} not in the output:\n{self.output()}"

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


class NotifyListener:
    """What systemd does with NOTIFY_SOCKET: a bound AF_UNIX datagram socket, each message kept
    with its arrival time."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.messages: list[tuple[float, dict[str, str]]] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.settimeout(0.2)
        self._closed = False
        self._thread = threading.Thread(target=self._receive, name="notify-listener", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append((time.monotonic(), fields))

    def with_key(self, key: str) -> list[tuple[float, dict[str, str]]]:
        return [(t, m) for t, m in self.messages if key in m]

    def close(self) -> None:
        self._closed = True
        self._thread.join(2)
        self.sock.close()


def landed_ids(spark: Any, tmp_path: Path) -> list[str]:
    """msg_ids landed so far; empty until the first Parquet file is committed."""
    table = tmp_path / "landing" / "orders"
    if not any(table.glob("put_date=*/*.parquet")):
        return []
    return [r.msg_id for r in spark.read.parquet(str(table)).select("msg_id").collect()]


def test_notify_ready_status_watchdog_stopping_in_order(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given systemd's notification socket (abstract namespace) with a 3 s watchdog, and a control
    # interval longer than the watchdog's half: pings must not depend on control ticks
    listener = NotifyListener(f"@mqbridge-test-{uuid.uuid4().hex}")
    config = write_config(tmp_path, unique_queue("notify"), control_interval="4s")
    bridge = BridgeProcess(config, {"NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "3000000"})
    try:
        # When the bridge runs until it has reported a status tick and several watchdog pings
        wait_until(lambda: len(listener.with_key("STATUS")) >= 2 and len(listener.with_key("WATCHDOG")) >= 5
                   or bridge.proc.poll() is not None, 180, "READY, STATUS and WATCHDOG")
        assert bridge.proc.poll() is None, bridge.output()
        # And is stopped with SIGTERM
        bridge.signal(signal.SIGTERM)
        assert bridge.wait(90) == 0, bridge.output()
        wait_until(lambda: bool(listener.with_key("STOPPING")), 10, "STOPPING=1")
    finally:
        bridge.kill()
        listener.close()

    # Then READY came first, STOPPING last, watchdog pings only in between and at least every
    # WATCHDOG_USEC / 2 = 1.5 s, and STATUS lines carry the listener summary
    keys = [set(m) for _t, m in listener.messages]
    assert "READY" in keys[0] and keys[0] & {"STATUS"}, keys[:3]
    assert "STOPPING" in keys[-1], keys[-3:]
    assert sum("READY" in k for k in keys) == 1 and sum("STOPPING" in k for k in keys) == 1
    pings = [t for t, _m in listener.with_key("WATCHDOG")]
    gaps = [b - a for a, b in zip(pings, pings[1:], strict=False)]
    assert max(gaps) < 1.5, gaps
    statuses = [m["STATUS"] for _t, m in listener.with_key("STATUS")]
    assert all(s.startswith("threads 2/2") and "committed=" in s for s in statuses[:-1]), statuses
    assert statuses[-1].startswith("draining"), statuses


def test_sigterm_mid_stream_loses_nothing(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a producer putting a stream of messages and a bridge draining the queue
    q = unique_queue("sigterm")
    config = write_config(tmp_path, q, shutdown_timeout="20s")
    sent: list[bytes] = []
    stop_producer = threading.Event()

    def produce() -> None:
        with AmqClient() as producer:
            while not stop_producer.is_set():
                batch = [f"s{len(sent) + i:07d}".encode() * 10 for i in range(200)]
                producer.put_many(q, batch)
                sent.extend(batch)
                stop_producer.wait(0.1)  # pace the stream at about 2,000 messages/s

    producer = threading.Thread(target=produce, name="producer", daemon=True)
    producer.start()
    bridge = BridgeProcess(config)
    try:
        wait_until(lambda: len(landed_ids(spark, tmp_path)) >= 1000 or bridge.proc.poll() is not None, 180,
                   "the first bulks to land")
        assert bridge.proc.poll() is None, bridge.output()
        # When SIGTERM arrives while messages keep coming
        start = time.monotonic()
        bridge.signal(signal.SIGTERM)
        code = bridge.wait(90)
        elapsed = time.monotonic() - start
    finally:
        stop_producer.set()
        producer.join(60)
        bridge.kill()

    # Then it exits 0 within shutdown_timeout, and every message sent either landed once and was
    # committed, or is back on the queue
    assert code == 0, bridge.output()
    assert elapsed < 20, f"took {elapsed:.1f}s"
    rows = read_table(spark, tmp_path / "landing" / "orders")
    landed = {r.msg_id: bytes(r.body) for r in rows}
    problems = "\n".join(line for line in bridge.lines if "WARNING" in line or "ERROR" in line or "CRITICAL" in line)
    assert len(rows) == len(landed), f"a graceful shutdown must not land a message twice:\n{problems}"
    left = [bytes(f.body) for f in amq.drain(q)]
    assert len(landed) + len(left) == len(sent), (len(landed), len(left), len(sent))
    assert set(landed.values()) | set(left) == set(sent)
    assert 0 < len(landed) < len(sent), "the test wants the signal to arrive mid-stream"


def test_sighup_reloads_plugins_and_configuration_now(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a bridge whose control thread ticks only every 10 minutes, with a drop-in plugin v1
    q = unique_queue("sighup")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "tag.py").write_text(textwrap.dedent(TAG.format(version="v1")))
    config = write_config(tmp_path, q, control_interval="10m", preprocessors='["tag"]')
    config.write_text(config.read_text().replace("plugin_dirs = []", 'plugin_dirs = ["plugins"]', 1))
    bridge = BridgeProcess(config)
    try:
        amq.put_many(q, [f"a{i}".encode() for i in range(5)])
        wait_until(lambda: len(landed_ids(spark, tmp_path)) == 5 or bridge.proc.poll() is not None, 180, "v1 rows")
        assert not bridge.has(" DEBUG "), "the test starts at level INFO"

        # When the plugin changes, the level and a restart-only key change, and SIGHUP arrives
        tmp = plugins / ".tag.tmp"
        tmp.write_text(textwrap.dedent(TAG.format(version="v2")))
        os.replace(tmp, plugins / "tag.py")
        text = config.read_text().replace("workers = 2", "workers = 3", 1)
        config.write_text(text + '\n[logging]\nlevel = "debug"\n')
        mark = len(bridge.lines)
        bridge.signal(signal.SIGHUP)

        # Then the plugin is reloaded at once (no control tick for 10 minutes), the level is
        # applied and the restart-only key is named
        bridge.wait_for_line("plugins reloaded", 30, mark)
        bridge.wait_for_line("reload: applied logging.level", 30, mark)
        bridge.wait_for_line("need a restart", 30, mark)
        restart = next(line for line in bridge.lines[mark:] if "need a restart" in line)
        assert "WARNING" in restart and restart.endswith(": collector.workers"), restart
        amq.put_many(q, [f"b{i}".encode() for i in range(5)])
        wait_until(lambda: len(landed_ids(spark, tmp_path)) == 10, 120, "v2 rows")
        wait_until(lambda: bridge.has(" DEBUG ", mark), 30, "a DEBUG line")
        assert bridge.proc.poll() is None
        bridge.signal(signal.SIGTERM)
        assert bridge.wait(90) == 0, bridge.output()
    finally:
        bridge.kill()
    versions = {bytes(r.body)[:1]: r.headers["plugin_version"]
                for r in read_table(spark, tmp_path / "landing" / "orders")}
    assert versions == {b"a": "v1", b"b": "v2"}


def test_windows_controller_drains_a_real_bridge(tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given the service controller running a real bridge in-process on a queue with messages
    q = unique_queue("winsvc")
    bodies = [f"w{i}".encode() * 30 for i in range(6000)]
    amq.put_many(q, bodies)
    config = write_config(tmp_path, q, shutdown_timeout="30s")
    reports: list[tuple[float, str, int]] = []
    controller = ServiceController(config, lambda state, hint: reports.append((time.monotonic(), state, hint)),
                                   progress_every=0.2)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(controller.run()), name="service-run", daemon=True)
    runner.start()
    try:
        wait_until(lambda: len(landed_ids(spark, tmp_path)) >= 500, 180, "the first bulks to land")
    finally:
        # When the service manager asks it to stop mid-stream
        controller.request_stop()
        runner.join(120)
    assert not runner.is_alive()

    # Then it reported RUNNING, then STOP_PENDING with a wait hint longer than its reporting
    # period until the drain ended, then STOPPED with exit status 0; nothing was lost
    states = [state for _t, state, _h in reports]
    assert states[0] == RUNNING and states[-1] == STOPPED and STOP_PENDING in states, states
    assert set(states[1:-1]) == {STOP_PENDING}
    pending = [(t, h) for t, state, h in reports if state == STOP_PENDING]
    assert all(h >= 400 for _t, h in pending)
    assert all(b[0] - a[0] < a[1] / 1000 for a, b in zip(pending, pending[1:], strict=False))
    assert result == [0]
    rows = read_table(spark, tmp_path / "landing" / "orders")
    landed = {bytes(r.body) for r in rows}
    left = {bytes(f.body) for f in amq.drain(q)}
    assert len(rows) == len(landed) and not (landed & left) and landed | left == set(bodies)
